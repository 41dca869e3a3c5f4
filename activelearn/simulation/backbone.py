"""A simulated PRM backbone that can learn the synthetic domain: digit tokens, LM-pretrained.

The PRM800K recipe at toy scale. Before any PRM training the backbone is pretrained as a
language model on plentiful *unlabeled* domain text (correct and wrong solutions sampled
from the domain, the paper's MathMix step); the campaign then fine-tunes it as a PRM on the
oracle's labels through the product's own ``train_prm``. A randomly initialised model
fine-tuned on a few hundred labels never learns to check ``17 * 23 = 391``; predicting the
next token of thousands of solutions is what teaches it the arithmetic.

* Tokenizer: word-level for the domain's small vocabulary, but every digit is its own token
  (``391`` -> ``3 9 1``), so numbers of any size share ten embeddings and carrying is
  learnable. Saved in Hugging Face format (``tokenizer.json``), so the product's loaders
  read it like any other tokenizer. The PRM step separator is in the vocabulary from the
  start and pretrained, so the PRM reads steps in the layout it was pretrained on.
* Model: a small Llama (``LlamaForCausalLM`` from a config, random init).
* Cache: ``<cache_root>/<fingerprint>/``, the fingerprint hashing the pretraining config
  (sizes, corpus, domain knobs, seed) and a format version; a second call with the same
  config trains nothing, a changed config gets its own directory.

Nothing here imports Django.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from activelearn.prm.recipes import PRETRAIN_FILE, register_backbone_prefix
from activelearn.simulation.domain import DomainConfig, build_dataset

SIM_BACKBONE_PREFIX = "sim:"
DEFAULT_SIM_BACKBONE = "sim:digits"
# Bump when the tokenizer, corpus layout or training loop changes meaning: old caches
# then stop matching instead of being silently reused.
FORMAT_VERSION = 1
PAD, UNK = "[PAD]", "[UNK]"
# The separator the PRM puts after each step (activelearn.prm.tokenization.DEFAULT_SEPARATOR).
STEP_SEPARATOR = "<|prm_step|>"
# Split words, single digits and single punctuation marks; whitespace is dropped. Numbers
# in the domain are always delimited by a word or an operator, so no boundary is lost.
PRETOKENIZE_PATTERN = r"\d|[A-Za-z]+|[^\sA-Za-z\d]"


@dataclass(frozen=True)
class PretrainConfig:
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    max_position_embeddings: int = 512
    corpus_problems: int = 5000
    corpus_solutions_per_problem: int = 3
    max_steps: int = 1200
    batch_size: int = 32
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    domain: DomainConfig = field(default_factory=DomainConfig)

    def fingerprint(self) -> str:
        fields = asdict(self)
        if self.domain.systematic_share == 0:
            # Misconception rates mean nothing without misconceptions: a random-error
            # corpus keeps the fingerprint it had before they existed, and its cache.
            for name in SYSTEMATIC_FIELDS:
                fields["domain"].pop(name)
        if self.domain.held_misconceptions is None:
            # Every misconception held: the fingerprint (and cache) it had before the field.
            fields["domain"].pop("held_misconceptions", None)
        payload = json.dumps({"format": FORMAT_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


SYSTEMATIC_FIELDS = ("systematic_share", "misconception_home_rate", "misconception_rate", "held_misconceptions")
# The systematic-error domain (misconceptions only): the generator whose samples both the
# backbone's pretraining corpus and the campaign's pools come from.
SYSTEMATIC_DOMAIN = DomainConfig(systematic_share=1.0)
# The "home" generator (activelearn.simulation.study.DOMAINS): mostly right, wrong only
# where it holds one of three misconceptions, each in its two home settings.
HOME_DOMAIN = DomainConfig(
    systematic_share=1.0,
    misconception_rate=0.0,
    held_misconceptions=("forget_multiply", "scale_as_add", "sell_from_start"),
)

# Pretrained on the systematic generator's own samples, misconceptions included at the
# rates it holds them: its surprise does not tell a misconception from the rule. Smaller
# than "digits" (64 wide, 2 layers, 800 steps: 0.4 s a step on one busy core) so that a
# sweep can pretrain one per generator.
_SYSTEMATIC = PretrainConfig(
    hidden_size=64,
    num_layers=2,
    num_heads=2,
    intermediate_size=192,
    corpus_problems=2000,
    max_steps=800,
    warmup_steps=50,
    domain=SYSTEMATIC_DOMAIN,
)

# Named sizes for the ``sim:<name>`` backbone spec.
SIM_BACKBONES: dict[str, PretrainConfig] = {
    "digits": PretrainConfig(),
    "systematic": _SYSTEMATIC,
    # The home generator's backbone: "systematic"'s size, longer on a larger corpus. At
    # 800 steps the LM has not yet learned which setting holds which rule, so its surprise
    # still finds the misconceptions (step AUROC 0.76); longer, it believes them where the
    # generator does (docs/simulation.md, "The home domain").
    "home": replace(_SYSTEMATIC, corpus_problems=10000, max_steps=4800, warmup_steps=100, domain=HOME_DOMAIN),
    # A few seconds of pretraining: for tests and smoke runs, not for measuring anything.
    "digits-tiny": PretrainConfig(
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        intermediate_size=64,
        corpus_problems=40,
        corpus_solutions_per_problem=2,
        max_steps=10,
        batch_size=8,
        warmup_steps=2,
    ),
}


def default_cache_root() -> Path:
    """``$ANNOTATE_VAR_DIR/simulation/backbones`` (``var/`` as in the Django settings)."""
    return Path(os.environ.get("ANNOTATE_VAR_DIR", "var")) / "simulation" / "backbones"


# ---------------------------------------------------------------------------- tokenizer


def corpus_texts(config: PretrainConfig) -> list[tuple[str, tuple[str, ...]]]:
    """(problem, steps) of the unlabeled pretraining corpus: correct and wrong solutions.

    Its problems come from their own seed stream (prefix ``pretrain``), so they are not the
    campaign's pool or held-out problems; the corpus carries no step labels.
    """
    dataset = build_dataset(
        config.corpus_problems, config.corpus_solutions_per_problem, config.seed, config.domain, prefix="pretrain"
    )
    texts = {problem.problem_id: problem.text for problem in dataset.problems}
    return [(texts[s.problem_id], s.step_texts) for s in dataset.all_solutions()]


def build_tokenizer(texts: Sequence[str]) -> Any:
    """A word-level tokenizer over ``texts``' words with one token per digit and symbol."""
    import re

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pattern = re.compile(PRETOKENIZE_PATTERN)
    words = sorted({piece for text in texts for piece in pattern.findall(text)} | set("0123456789+-*=#.,?"))
    vocab = {PAD: 0, UNK: 1, STEP_SEPARATOR: 2}
    for word in words:
        vocab.setdefault(word, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated")
    # The Split pre-tokenizer keeps whitespace runs as pieces of their own; they are not
    # in the vocabulary, so drop them before lookup instead of turning them into [UNK].
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), core.pre_tokenizer])
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core, pad_token=PAD, unk_token=UNK, additional_special_tokens=[STEP_SEPARATOR]
    )
    return tokenizer


def encode_solution(tokenizer: Any, problem: str, steps: Sequence[str]) -> list[int]:
    """The PRM's layout (activelearn.prm.tokenization): problem, then each step and a separator."""
    separator = int(tokenizer.convert_tokens_to_ids(STEP_SEPARATOR))
    pieces: list[list[int]] = tokenizer([problem, *steps], add_special_tokens=False)["input_ids"]
    ids = list(pieces[0])
    for step in pieces[1:]:
        ids.extend(step)
        ids.append(separator)
    return ids


# ----------------------------------------------------------------------------- pretrain


@dataclass(frozen=True)
class PretrainedBackbone:
    directory: Path
    trained: bool  # False when the cache already held it
    seconds: float
    final_loss: float | None


def pretrained_backbone(
    config: PretrainConfig,
    cache_root: Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> PretrainedBackbone:
    """The cached pretrained backbone for ``config``, pretraining it first if missing."""
    from activelearn.prm.atomic_dir import atomic_directory

    directory = (cache_root or default_cache_root()) / config.fingerprint()
    if (directory / PRETRAIN_FILE).is_file():
        record = json.loads((directory / PRETRAIN_FILE).read_text())
        return PretrainedBackbone(directory, trained=False, seconds=0.0, final_loss=record.get("final_loss"))
    started = time.monotonic()
    with atomic_directory(directory) as scratch:
        model, tokenizer, losses = _pretrain(config, progress)
        model.save_pretrained(str(scratch))
        tokenizer.save_pretrained(str(scratch))
        seconds = time.monotonic() - started
        tail = losses[-50:]
        final_loss = sum(tail) / len(tail) if tail else None
        # Written last: its presence marks a complete cache entry.
        (scratch / PRETRAIN_FILE).write_text(
            json.dumps(
                {
                    "config": asdict(config),
                    "fingerprint": config.fingerprint(),
                    "seconds": seconds,
                    "final_loss": final_loss,
                    "loss_curve": losses[:: max(1, len(losses) // 100)],
                },
                indent=1,
                default=str,
            )
        )
    return PretrainedBackbone(directory, trained=True, seconds=seconds, final_loss=final_loss)


def resolve_sim_backbone(spec: str, cache_root: Path | None = None) -> Path:
    """``sim:<name>`` -> the directory of its cached pretrained backbone."""
    name = spec.removeprefix(SIM_BACKBONE_PREFIX)
    if name not in SIM_BACKBONES:
        raise ValueError(f"unknown simulated backbone {spec!r}; known: {sorted(SIM_BACKBONES)}")
    return pretrained_backbone(SIM_BACKBONES[name], cache_root).directory


# ``load_backbone("sim:<name>")`` (activelearn.prm.backbones) resolves through this.
register_backbone_prefix(SIM_BACKBONE_PREFIX, resolve_sim_backbone)


def _pretrain(config: PretrainConfig, progress: Callable[[str], None] | None) -> tuple[Any, Any, list[float]]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    say = progress or (lambda message: None)
    corpus = corpus_texts(config)
    tokenizer = build_tokenizer([problem for problem, _ in corpus] + [s for _, steps in corpus for s in steps])
    sequences = [encode_solution(tokenizer, problem, steps) for problem, steps in corpus]
    torch.manual_seed(config.seed)
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        use_cache=False,
    )
    model = LlamaForCausalLM(model_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)

    def rate(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress_share = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress_share)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    rng = random.Random(f"pretrain:{config.seed}")
    order: list[int] = []
    losses: list[float] = []
    model.train()
    for step in range(config.max_steps):
        if len(order) < config.batch_size:
            order.extend(rng.sample(range(len(sequences)), len(sequences)))
        batch = [sequences[order.pop()] for _ in range(config.batch_size)]
        width = min(config.max_position_embeddings, max(len(row) for row in batch))
        input_ids = torch.full((len(batch), width), int(tokenizer.pad_token_id), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            ids = ids[:width]
            input_ids[row, : len(ids)] = torch.as_tensor(ids)
            mask[row, : len(ids)] = 1
        labels = input_ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))
        if (step + 1) % 100 == 0 or step + 1 == config.max_steps:
            recent = losses[-100:]
            say(f"pretrain step {step + 1}/{config.max_steps} loss {sum(recent) / len(recent):.3f}")
    model.train(False)
    return model, tokenizer, losses
