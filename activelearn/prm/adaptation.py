"""Continued language-model training of a PRM backbone on unlabeled solutions.

The PRM800K recipe's first step at the scale of one lab's pool: before any PRM training,
the backbone keeps training as a language model (predict the next token) on the pool's
own unlabeled solutions, laid out exactly as the PRM reads them (problem, then each step
and its separator; ``tokenization.StepEncoder``). Two things can change: the hidden state
at a separator (what the head reads) and the LM's surprise at a step's tokens (the
``surprise`` step feature), which after adaptation measures surprise *in this domain's
text* rather than in the pretraining mix.

Only causal LMs whose output embeddings are their input embeddings can be adapted: the
product loads base models (no separate LM head), and with tied weights the embeddings are
the head. The embeddings stay frozen (they are the largest matrix; on a CPU their
gradient costs as much as the rest), and so do all but the top ``train_layers`` blocks.

The adapted backbone is written, atomically, as an ordinary local Hugging Face directory
(with the step separator in its tokenizer, its embedding kept), so ``train_prm --backbone
DIR`` trains on it like on any backbone; ``adaptation.json`` beside it records the config,
the data and the held-out LM loss before and after.

Nothing here imports Django.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from activelearn.prm.atomic_dir import atomic_directory
from activelearn.prm.freezing import freeze_lower_layers
from activelearn.prm.modeling import ProcessRewardModel, tied_lm_refusal

ADAPTATION_FILE = "adaptation.json"


@dataclass(frozen=True)
class AdaptConfig:
    max_steps: int = 100
    batch_size: int = 4
    learning_rate: float = 1e-4
    warmup_steps: int = 10
    weight_decay: float = 0.0
    # Top transformer blocks trained (with what follows them, a final norm); 0 = all.
    train_layers: int = 4
    max_length: int = 512
    # Share of the problems whose solutions are held out to measure the LM loss.
    heldout_share: float = 0.1
    max_heldout_windows: int = 64
    seed: int = 0


@dataclass(frozen=True)
class AdaptReport:
    directory: Path
    solutions: int
    train_windows: int
    heldout_windows: int
    train_tokens_seen: int
    heldout_loss_before: float | None
    heldout_loss_after: float | None
    seconds: float
    losses: tuple[float, ...]


def check_adaptable(backbone: PreTrainedModel) -> None:
    if refusal := tied_lm_refusal(backbone, "language-model adaptation"):
        raise ValueError(refusal)


def _heldout(problem: str, share: float, seed: int) -> bool:
    # By problem, not by solution: a held-out loss on other solutions of a trained
    # problem would measure memorised problem text.
    digest = hashlib.sha256(f"{seed}:{problem}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def _batch(windows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(w) for w in windows)
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(windows), width), dtype=torch.long)
    for row, ids in enumerate(windows):
        input_ids[row, : len(ids)] = torch.as_tensor(list(ids), dtype=torch.long)
        mask[row, : len(ids)] = 1
    return input_ids, mask


def lm_loss(backbone: PreTrainedModel, input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over the real tokens, and how many were predicted.

    Logits come from the tied embeddings; they are computed per row because a batch's
    [B, T, vocab] block is large (49k entries per position for SmolLM2).
    """
    hidden = backbone(input_ids=input_ids, attention_mask=mask).last_hidden_state
    embeddings = backbone.get_input_embeddings()
    assert isinstance(embeddings, nn.Embedding)
    weight = embeddings.weight
    total = hidden.new_zeros((), dtype=torch.float32)
    count = 0
    for row in range(input_ids.shape[0]):
        length = int(mask[row].sum())
        if length < 2:
            continue
        logits = hidden[row, : length - 1].float() @ weight.float().T
        total = total + nn.functional.cross_entropy(logits, input_ids[row, 1:length], reduction="sum")
        count += length - 1
    return total, count


def _mean_loss(
    backbone: PreTrainedModel, windows: Sequence[Sequence[int]], pad_id: int, batch_size: int
) -> float | None:
    if not windows:
        return None
    was_training = backbone.training
    backbone.train(False)
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            loss, n = lm_loss(backbone, *_batch(windows[start : start + batch_size], pad_id))
            total += float(loss)
            count += n
    backbone.train(was_training)
    return total / count if count else None


def adapt_backbone(
    spec: str | Path,
    solutions: Sequence[tuple[str, Sequence[str]]],
    output_dir: Path,
    config: AdaptConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> AdaptReport:
    """Continue LM training of ``spec`` on ``solutions`` ((problem, steps)); write it to ``output_dir``."""
    config = config or AdaptConfig()
    say = progress or (lambda message: None)
    if config.max_steps < 1 or config.batch_size < 1:
        raise ValueError("max_steps and batch_size must be at least 1")
    if not 0 <= config.heldout_share < 1:
        raise ValueError(f"heldout_share must be in [0, 1), got {config.heldout_share}")
    if not solutions:
        raise ValueError("no solutions to adapt on: select some unlabeled solutions (e.g. a split with a pool)")
    started = time.monotonic()
    torch.manual_seed(config.seed)
    # The PRM's own constructor adds the separator (and its embedding) and builds the
    # encoder, so the adapted LM is trained on the PRM's layout, separator included.
    prm, tokenizer = ProcessRewardModel.from_backbone(spec, max_length=config.max_length)
    backbone = prm.backbone
    check_adaptable(backbone)
    encoder = prm.step_encoder(tokenizer)
    train: list[tuple[int, ...]] = []
    heldout: list[tuple[int, ...]] = []
    for (problem, _), windows in zip(solutions, encoder.encode_many(solutions), strict=True):
        target = heldout if _heldout(problem, config.heldout_share, config.seed) else train
        target.extend(window.input_ids for window in windows)
    if not train:
        raise ValueError(f"all {len(solutions)} solutions fell in the held-out share; give more problems")
    rng = random.Random(f"adapt:{config.seed}")
    heldout = rng.sample(heldout, min(len(heldout), config.max_heldout_windows))
    pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    before = _mean_loss(backbone, heldout, pad_id, config.batch_size)
    say(f"{len(train)} training windows, {len(heldout)} held out; held-out loss before {before}")

    total_layers = int(getattr(backbone.config, "num_hidden_layers", 0))
    frozen = max(0, total_layers - config.train_layers) if config.train_layers > 0 else 0
    freeze_lower_layers(prm, frozen)
    # The tied embeddings are the LM head: frozen even when every block trains.
    backbone.get_input_embeddings().requires_grad_(False)
    parameters = [p for p in backbone.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate, weight_decay=config.weight_decay)

    def rate(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        share = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, share)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    order: list[int] = []
    losses: list[float] = []
    tokens = 0
    backbone.train(True)
    for step in range(config.max_steps):
        if len(order) < config.batch_size:
            order.extend(rng.sample(range(len(train)), len(train)))
        batch = [train[order.pop()] for _ in range(min(config.batch_size, len(train)))]
        loss_sum, count = lm_loss(backbone, *_batch(batch, pad_id))
        loss = loss_sum / max(1, count)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        tokens += count
        if (step + 1) % 10 == 0 or step + 1 == config.max_steps:
            recent = losses[-10:]
            say(f"step {step + 1}/{config.max_steps} loss {sum(recent) / len(recent):.3f}")
    backbone.train(False)
    after = _mean_loss(backbone, heldout, pad_id, config.batch_size)
    say(f"held-out loss after {after}")
    backbone.requires_grad_(True)
    seconds = time.monotonic() - started
    report = AdaptReport(
        directory=output_dir,
        solutions=len(solutions),
        train_windows=len(train),
        heldout_windows=len(heldout),
        train_tokens_seen=tokens,
        heldout_loss_before=before,
        heldout_loss_after=after,
        seconds=seconds,
        losses=tuple(losses),
    )
    with atomic_directory(output_dir) as scratch:
        backbone.save_pretrained(str(scratch))
        tokenizer.save_pretrained(str(scratch))
        record = {
            "base_model": str(spec),
            "config": asdict(config),
            **{k: v for k, v in asdict(report).items() if k not in ("directory", "losses")},
            "loss_curve": losses,
        }
        # Written last: a directory without it is not a finished adaptation.
        (scratch / ADAPTATION_FILE).write_text(json.dumps(record, indent=1))
    return report
