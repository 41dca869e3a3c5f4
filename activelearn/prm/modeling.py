"""The process reward model: a transformers backbone plus a 3-class head read at step separators."""

from __future__ import annotations

import json
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
from activelearn.prm.backbones import load_backbone, load_backbone_from_directory, load_tokenizer
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


@dataclass
class PRMConfig:
    base_model: str
    hidden_size: int
    separator: str = DEFAULT_SEPARATOR
    max_length: int = 512
    max_problem_tokens: int = 256
    label_names: list[str] = field(default_factory=lambda: list(LABEL_NAMES))
    rating_to_class: dict[str, int] = field(default_factory=lambda: {str(k): v for k, v in RATING_TO_CLASS.items()})
    format_version: int = FORMAT_VERSION

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
        self.head = nn.Linear(config.hidden_size, len(config.label_names))
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
        dtype: torch.dtype | None = None,
    ) -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
        """Fresh PRM (untrained head) on top of a backbone; see ``backbones.load_backbone``."""
        loaded = load_backbone(spec, dtype=dtype)
        backbone, tokenizer = loaded.model, loaded.tokenizer
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

    def save_pretrained(self, directory: str | Path, tokenizer: PreTrainedTokenizerBase) -> Path:
        target = Path(directory)
        with atomic_directory(target) as scratch:
            self.backbone.save_pretrained(str(scratch / BACKBONE_DIR))
            tokenizer.save_pretrained(str(scratch / TOKENIZER_DIR))
            head_state = {k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()}
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
    ) -> PRMOutput:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        # Only separator positions matter, so the head runs on those rows alone.
        if labels is not None:
            selected = labels != IGNORE_INDEX
            logits = self.head(hidden[selected].to(self.head.weight.dtype))
            targets = labels[selected]
            # An all-unlabeled batch still yields a connected (zero) loss: under DDP every
            # rank has to run backward.
            weights = None if self.class_weights is None else self.class_weights.to(logits.device)
            loss = F.cross_entropy(logits.float(), targets, weight=weights) if targets.numel() else logits.sum() * 0.0
            return PRMOutput(logits=logits, loss=loss)
        if positions is not None:
            rows, cols = positions
            return PRMOutput(logits=self.head(hidden[rows, cols].to(self.head.weight.dtype)), loss=None)
        return PRMOutput(logits=self.head(hidden.to(self.head.weight.dtype)), loss=None)


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
