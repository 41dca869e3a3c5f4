"""The process reward model: a transformers backbone plus a 3-class head read at step separators."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.atomic_dir import atomic_directory
from activelearn.prm.backbones import is_causal_lm_config, load_backbone, load_backbone_from_directory, load_tokenizer
from activelearn.prm.tokenization import DEFAULT_SEPARATOR, StepEncoder, add_step_separator

LABEL_NAMES: tuple[str, str, str] = ("negative", "neutral", "positive")
NEGATIVE, NEUTRAL, POSITIVE = 0, 1, 2
# PRM800K ratings -> head class index.
RATING_TO_CLASS: dict[int, int] = {-1: NEGATIVE, 0: NEUTRAL, 1: POSITIVE}
IGNORE_INDEX = -100
DEFAULT_MAX_LENGTH = 2048
CONFIG_FILE = "prm_config.json"
HEAD_FILE = "head.safetensors"
BACKBONE_DIR = "backbone"
TOKENIZER_DIR = "tokenizer"
FORMAT_VERSION = 1
# Step features: numbers the head reads beside the backbone's hidden state at a step's
# separator, computed from the step's own tokens. "surprise": the max, mean and sum over
# the step's tokens (its separator included) of -log p(token | everything before it)
# under the backbone's own language-model head. A causal LM pretrained on the domain
# gives a wrong written number or operator a low probability, and that is a signal a
# linear head on one hidden vector finds hard to learn from a few hundred labels
# (docs/simulation.md measures both). "span": the mean of the backbone's output over the
# step's tokens (its separator included), as wide as the hidden state: the separator's
# state alone summarises the step through one token, and on CHAMP the span beside it
# raises step AUROC (docs/prm.md, "Which reading of a step carries the signal"). The
# value is each feature's width; None: the hidden size.
SURPRISE_WIDTH = 3
STEP_FEATURES: dict[str, int | None] = {"surprise": SURPRISE_WIDTH, "span": None}
# activelearn.prm.data.OBJECTIVES (data imports this module, not the other way round).
OBJECTIVES = ("process", "outcome")


def weighted_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    class_weights: torch.Tensor | None = None,
    label_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy averaged over labels with weight class_weight[y] x label_weight.

    A weighted mean, like ``F.cross_entropy(weight=)``, which it equals without label
    weights: two copies of one input with label weights p and 1 - p then cost exactly the
    soft-target cross-entropy of (p, 1 - p). A batch whose labels all weigh nothing costs
    a connected zero (under DDP every rank has to run backward).
    """
    per_label = F.cross_entropy(logits.float(), targets, weight=class_weights, reduction="none")
    weights = torch.ones_like(per_label) if class_weights is None else class_weights[targets].float()
    if label_weights is not None:
        weights = weights * label_weights.float()
    if targets.numel() == 0:
        return logits.sum() * 0.0
    # F.cross_entropy's per-label terms already carry the class weight. Where every weight
    # is 0 the sum is a connected 0 too; the clamp (not a branch) spares a device sync.
    per_label = per_label if label_weights is None else per_label * label_weights.float()
    return per_label.sum() / weights.sum().clamp_min(torch.finfo(torch.float32).tiny)


@dataclass
class PRMConfig:
    base_model: str
    hidden_size: int
    separator: str = DEFAULT_SEPARATOR
    max_length: int = 512
    max_problem_tokens: int = 256
    label_names: list[str] = field(default_factory=lambda: list(LABEL_NAMES))
    rating_to_class: dict[str, int] = field(default_factory=lambda: {str(k): v for k, v in RATING_TO_CLASS.items()})
    # Names from STEP_FEATURES; saved PRMs from before this field read as none.
    step_features: list[str] = field(default_factory=list)
    # "process" (a PRM: human step labels) or "outcome" (an ORM: final-answer verdicts,
    # read at the final step); saved models from before this field read as "process".
    objective: str = "process"
    # How many of the backbone's transformer layers are kept: the head reads the output of
    # the last one kept (``cut_backbone``), and the saved backbone holds only those layers.
    # None: all of them (saved PRMs from before this field).
    backbone_layers: int | None = None
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        if self.backbone_layers is not None and "surprise" in self.step_features:
            # The surprise is the LM head's reading of the last layer, which a cut backbone lacks.
            raise ValueError("step feature 'surprise' needs the whole backbone; it cannot go with backbone_layers")

    @property
    def head_inputs(self) -> int:
        return self.hidden_size + sum(step_feature_width(name, self.hidden_size) for name in self.step_features)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PRMConfig:
        data: dict[str, Any] = json.loads(text)
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unsupported PRM format_version {data.get('format_version')!r}")
        return cls(**data)


@dataclass
class PRMOutput:
    # [n, 3] at the selected/labeled positions, or [batch, seq, 3] when none were selected.
    logits: torch.Tensor
    loss: torch.Tensor | None


class ProcessRewardModel(nn.Module):
    def __init__(self, backbone: PreTrainedModel, config: PRMConfig) -> None:
        super().__init__()
        # The pooler is never used; leaving it in would make DDP complain about
        # parameters that get no gradient.
        if getattr(backbone, "pooler", None) is not None:
            setattr(backbone, "pooler", None)  # noqa: B010 -- the attribute is typed as a Module
        self.backbone = backbone
        self.prm_config = config
        check_step_features(backbone, config.step_features)
        self.head = nn.Linear(config.head_inputs, len(config.label_names))
        # Per-class loss weights set for training (activelearn.prm.training); not saved.
        self.class_weights: torch.Tensor | None = None

    @classmethod
    def from_backbone(
        cls,
        spec: str | Path = "builtin:minilm",
        *,
        max_length: int | None = None,
        max_problem_tokens: int | None = None,
        separator: str = DEFAULT_SEPARATOR,
        step_features: Sequence[str] = (),
        backbone_layers: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
        """Fresh PRM (untrained head) on top of a backbone; see ``backbones.load_backbone``.

        ``backbone_layers`` keeps only the backbone's lowest layers (``cut_backbone``)."""
        loaded = load_backbone(spec, dtype=dtype)
        backbone, tokenizer = loaded.model, loaded.tokenizer
        if backbone_layers == getattr(backbone.config, "num_hidden_layers", None):
            backbone_layers = None  # every layer: nothing to cut
        if backbone_layers is not None:
            cut_backbone(backbone, backbone_layers)
        # A backbone pretrained with the separator in its vocabulary (the simulated
        # domain's) has learned its embedding; only a newly added separator is initialised.
        pretrained_separator = separator in tokenizer.get_vocab()
        sep_id = add_step_separator(tokenizer, separator)
        if not pretrained_separator:
            _init_separator_embedding(backbone, sep_id, len(tokenizer))
        positions = getattr(backbone.config, "max_position_embeddings", None)
        # Never past the backbone's position table, whatever a recipe asks for.
        length = min(max_length or DEFAULT_MAX_LENGTH, positions or DEFAULT_MAX_LENGTH)
        config = PRMConfig(
            base_model=loaded.base_model_name,
            hidden_size=int(backbone.config.hidden_size),
            separator=separator,
            max_length=length,
            max_problem_tokens=max_problem_tokens if max_problem_tokens is not None else length // 2,
            step_features=list(step_features),
            backbone_layers=backbone_layers,
        )
        model = cls(backbone, config)
        if dtype is not None:
            model.head.to(dtype)
        return model, tokenizer

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, *, dtype: torch.dtype | None = None
    ) -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
        directory = Path(directory)
        config = PRMConfig.from_json((directory / CONFIG_FILE).read_text())
        backbone = load_backbone_from_directory(directory / BACKBONE_DIR, dtype=dtype)
        tokenizer = load_tokenizer(directory / TOKENIZER_DIR)
        model = cls(backbone, config)
        model.head.load_state_dict(load_file(str(directory / HEAD_FILE)))
        if dtype is not None:
            model.head.to(dtype)
        return model, tokenizer

    def save_pretrained(
        self,
        directory: str | Path,
        tokenizer: PreTrainedTokenizerBase,
        *,
        state_dict: dict[str, torch.Tensor] | None = None,
    ) -> Path:
        """Write the PRM; ``state_dict`` (this model's, gathered from FSDP shards) replaces
        the weights this process holds."""
        target = Path(directory)
        backbone_state = head_state = None
        if state_dict is not None:
            backbone_state = _with_prefix(state_dict, "backbone.")
            head_state = _with_prefix(state_dict, "head.")
        with atomic_directory(target) as scratch:
            self.backbone.save_pretrained(str(scratch / BACKBONE_DIR), state_dict=backbone_state)
            tokenizer.save_pretrained(str(scratch / TOKENIZER_DIR))
            head_state = {k: v.detach().contiguous().cpu() for k, v in (head_state or self.head.state_dict()).items()}
            save_file(head_state, str(scratch / HEAD_FILE))
            # Written last: its presence marks a complete save for anyone listing files.
            (scratch / CONFIG_FILE).write_text(self.prm_config.to_json())
        return target

    def step_encoder(self, tokenizer: PreTrainedTokenizerBase) -> StepEncoder:
        return StepEncoder(
            tokenizer,
            separator=self.prm_config.separator,
            max_length=self.prm_config.max_length,
            max_problem_tokens=self.prm_config.max_problem_tokens,
        )

    def enable_gradient_checkpointing(self) -> None:
        # Non-reentrant checkpointing works with DDP and with inputs that need no grad.
        self.backbone.gradient_checkpointing_enable(  # type: ignore[no-untyped-call]
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor | None = None,
        positions: tuple[torch.Tensor, torch.Tensor] | None = None,
        step_starts: torch.Tensor | None = None,
        label_weights: torch.Tensor | None = None,
    ) -> PRMOutput:
        """Head logits at the labeled separators (``labels``) or at ``positions``.

        ``step_starts`` gives where each step's tokens begin (``EncodedWindow.step_starts``):
        laid out like ``labels`` ([batch, seq]) or parallel to ``positions``. Only step
        features read it; a PRM without them ignores it. ``label_weights`` (laid out like
        ``labels``) weighs each label's loss (``weighted_cross_entropy``).
        """
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        # Only separator positions matter, so the head runs on those rows alone.
        if labels is not None:
            rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
            starts = None if step_starts is None else step_starts[rows, cols]
            logits = self.head(self.head_vectors(hidden, input_ids, rows, cols, starts))
            targets = labels[rows, cols]
            weights = None if self.class_weights is None else self.class_weights.to(logits.device)
            per_label = None if label_weights is None else label_weights[rows, cols]
            return PRMOutput(logits=logits, loss=weighted_cross_entropy(logits, targets, weights, per_label))
        if positions is not None:
            rows, cols = positions
            return PRMOutput(logits=self.head(self.head_vectors(hidden, input_ids, rows, cols, step_starts)), loss=None)
        if self.prm_config.step_features:
            raise ValueError("a PRM with step features scores separators only: pass labels or positions")
        return PRMOutput(logits=self.head(hidden.to(self.head.weight.dtype)), loss=None)

    def head_vectors(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        rows: torch.Tensor,
        cols: torch.Tensor,
        starts: torch.Tensor | None,
    ) -> torch.Tensor:
        """What the head reads at each (row, col) separator: the hidden state, then the
        step features in ``prm_config.step_features`` order."""
        vectors = hidden[rows, cols].to(self.head.weight.dtype)
        if not self.prm_config.step_features:
            return vectors
        if starts is None:
            raise ValueError("step features need step_starts (EncodedWindow.step_starts)")
        parts = [vectors]
        for name in self.prm_config.step_features:
            if name == "surprise":
                parts.append(self._surprise(hidden, input_ids, rows, cols, starts).to(vectors.dtype))
            elif name == "span":
                parts.append(_span_means(hidden, rows, cols, starts).to(vectors.dtype))
        return torch.cat(parts, dim=-1)

    def _surprise(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        rows: torch.Tensor,
        cols: torch.Tensor,
        starts: torch.Tensor,
    ) -> torch.Tensor:
        embeddings = self.backbone.get_input_embeddings()
        assert isinstance(embeddings, nn.Embedding)
        out = torch.zeros(len(rows), SURPRISE_WIDTH, device=hidden.device)
        if not len(rows):
            return out
        # One log-softmax per sequence over the span its scored steps cover: the
        # position before a token predicts it, so token t's surprise is read at t - 1.
        # The vocabulary can be large (49k for SmolLM2), hence not the whole batch at once.
        for row in sorted(set(rows.tolist())):
            members = (rows == row).nonzero(as_tuple=True)[0]
            first = max(1, int(starts[members].min()))
            last = int(cols[members].max())
            logits = hidden[row, first - 1 : last].float() @ embeddings.weight.float().T
            targets = input_ids[row, first : last + 1]
            surprise = -torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
            for member in members.tolist():
                start = max(1, int(starts[member]))
                span = surprise[start - first : int(cols[member]) - first + 1]
                out[member] = torch.stack([span.max(), span.mean(), span.sum()])
        return out


def _span_means(hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """The mean of ``hidden[row, start : col + 1]`` for each (row, col, start): a cumulative
    sum per row, so a window's many steps cost one pass over it, not one per step."""
    if not len(rows):
        return hidden.new_zeros(0, hidden.shape[-1])
    sums = torch.cumsum(hidden.float(), dim=1)
    ends = sums[rows, cols]
    before = torch.where((starts > 0)[:, None], sums[rows, (starts - 1).clamp_min(0)], torch.zeros_like(ends))
    counts = (cols - starts + 1).clamp_min(1).to(ends.dtype)[:, None]
    return (ends - before) / counts


def step_feature_width(name: str, hidden_size: int) -> int:
    width = STEP_FEATURES[name]
    return hidden_size if width is None else width


def transformer_blocks(backbone: nn.Module) -> nn.ModuleList | None:
    """The backbone's one ``ModuleList`` of ``num_hidden_layers`` blocks (``encoder.layer``
    in BERT, ``layers`` in Llama), found by shape rather than by name so any transformers
    architecture works."""
    config = getattr(backbone, "config", None)
    total = int(getattr(config, "num_hidden_layers", 0) or 0)
    return next(
        (m for m in backbone.modules() if isinstance(m, nn.ModuleList) and len(m) == total and total),
        None,
    )


def cut_backbone(backbone: PreTrainedModel, layers: int) -> None:
    """Keep the backbone's lowest ``layers`` transformer layers, in place.

    A causal LM's middle layers carry more of what makes a step wrong than its last, which
    is shaped for predicting the next token (docs/prm.md, "Which reading of a step carries
    the signal"); cutting after them also halves the forward pass. The output keeps the
    backbone's final norm, if it has one. The config says how many layers remain, so a
    saved cut backbone loads as what it is.
    """
    total = int(getattr(backbone.config, "num_hidden_layers", 0) or 0)
    if not 1 <= layers <= total:
        raise ValueError(f"backbone_layers must be between 1 and the backbone's {total} layers, got {layers}")
    blocks = transformer_blocks(backbone)
    if blocks is None:
        raise ValueError(f"cannot find {type(backbone).__name__}'s transformer layers to cut")
    del blocks[layers:]
    backbone.config.num_hidden_layers = layers
    # Configs that list a type per layer (sliding or full attention) list the kept ones.
    layer_types = getattr(backbone.config, "layer_types", None)
    if isinstance(layer_types, list):
        backbone.config.layer_types = layer_types[:layers]


def _with_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)}


def check_step_features(backbone: PreTrainedModel, names: Sequence[str]) -> None:
    """Refuse step features a backbone cannot compute, naming the feature and the reason."""
    for name in names:
        if name not in STEP_FEATURES:
            raise ValueError(f"unknown step feature {name!r}; known: {sorted(STEP_FEATURES)}")
        if names.count(name) > 1:
            raise ValueError(f"step feature {name!r} is named twice")
        if name == "surprise" and (refusal := tied_lm_refusal(backbone, "step feature 'surprise'")):
            raise ValueError(refusal)


def tied_lm_refusal(backbone: PreTrainedModel, what: str) -> str | None:
    """Why ``what`` (something that reads the LM's next-token predictions) cannot run on this
    backbone, or None when it can: it is a causal LM whose output embeddings are its input
    embeddings. A base model keeps its input embeddings only; with tied weights they are the
    LM head, and an encoder's head never predicted the next token."""
    config = getattr(backbone, "config", None)
    if config is not None and is_causal_lm_config(config) and getattr(config, "tie_word_embeddings", False):
        return None
    return (
        f"{what} needs a causal language model whose output embeddings are its input embeddings "
        f"(tie_word_embeddings); {type(backbone).__name__} "
        f"({getattr(config, '_name_or_path', '') or 'this backbone'}) is not"
    )


def _init_separator_embedding(backbone: PreTrainedModel, sep_id: int, vocab_len: int) -> None:
    embeddings = backbone.get_input_embeddings()
    if not isinstance(embeddings, nn.Embedding):
        raise TypeError("backbone input embeddings must be an nn.Embedding")
    if sep_id >= embeddings.num_embeddings:
        # mean_resizing=False: we set the new row ourselves, deterministically.
        backbone.resize_token_embeddings(vocab_len, mean_resizing=False)
        embeddings = backbone.get_input_embeddings()
        assert isinstance(embeddings, nn.Embedding)
    with torch.no_grad():
        # Some vocabularies are padded (Qwen), so the separator may reuse a row that was
        # never trained; the mean embedding is a neutral, deterministic starting point.
        trained_rows = min(sep_id, embeddings.num_embeddings)
        embeddings.weight[sep_id] = embeddings.weight[:trained_rows].float().mean(dim=0).to(embeddings.weight.dtype)
