"""Batched inference: per-step P(correct) and a solution-level score."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm import feature_cache as feature_cache_module
from activelearn.prm.batching import pad_batch
from activelearn.prm.feature_cache import FeatureCache
from activelearn.prm.modeling import NEGATIVE, NEUTRAL, POSITIVE, ProcessRewardModel
from activelearn.prm.tokenization import EncodedWindow

# How step scores become a solution score. "product" is PRM800K's; it favours short
# solutions (every step multiplies in a factor below 1), which is why the aggregation a
# checkpoint uses is chosen on validation (activelearn.prm.calibration), not fixed.
Reduction = Literal["product", "min", "mean", "last"]
REDUCTIONS: tuple[Reduction, ...] = ("min", "product", "mean", "last")
NeutralAs = Literal["positive", "negative"]


class SolutionLike(Protocol):
    @property
    def problem(self) -> str: ...

    @property
    def steps(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Solution:
    problem: str
    steps: tuple[str, ...]


@dataclass(frozen=True)
class SolutionScore:
    step_scores: tuple[float, ...]  # P(step is fine), one per input step
    score: float
    # Full class probabilities per step (negative, neutral, positive), for analysis.
    step_probabilities: tuple[tuple[float, float, float], ...]


def step_score(probabilities: Sequence[float], neutral_as: NeutralAs = "positive") -> float:
    if neutral_as == "positive":
        return float(probabilities[POSITIVE] + probabilities[NEUTRAL])
    return float(probabilities[POSITIVE])


def reduce_steps(scores: Sequence[float], reduction: Reduction = "product") -> float:
    if reduction == "product":
        return math.prod(scores)
    if reduction == "min":
        return min(scores)
    if reduction == "mean":
        return sum(scores) / len(scores)
    if reduction == "last":
        return scores[-1]
    raise ValueError(f"unknown reduction {reduction!r}")


def score_solutions(
    model: ProcessRewardModel,
    tokenizer: PreTrainedTokenizerBase,
    solutions: Sequence[SolutionLike | tuple[str, Sequence[str]]],
    batch_size: int = 16,
    reduction: Reduction = "product",
    neutral_as: NeutralAs = "positive",
    *,
    feature_cache: FeatureCache | None = None,
) -> list[SolutionScore]:
    """Score every step of every solution; results come back in input order.

    Windows are sorted by length before batching so each batch pads to nearly its own
    length; long solutions are split into windows (see ``tokenization``) so every step
    gets a score. Every solution needs at least one step. The PRM reads the backbone's output
    through the feature cache when one is given or configured (``feature_cache``): same
    scores, the forward pass only for windows not seen before.
    """
    pairs = [item if isinstance(item, tuple) else (item.problem, item.steps) for item in solutions]
    encoder = model.step_encoder(tokenizer)
    encoded = encoder.encode_many(pairs)
    windows: list[tuple[int, EncodedWindow]] = [
        (solution_index, window) for solution_index, item in enumerate(encoded) for window in item
    ]
    windows.sort(key=lambda pair: len(pair[1].input_ids))
    probabilities: list[list[tuple[float, float, float]]] = [
        [(math.nan, math.nan, math.nan)] * len(steps) for _, steps in pairs
    ]
    device = next(model.parameters()).device
    cache = feature_cache or feature_cache_module.configured()
    if cache is not None:
        # A head over cached backbone output: the forward pass runs only for unseen windows.
        vectors: list[torch.Tensor]
        if feature_cache_module.cacheable(model):
            by_window = feature_cache_module.separator_hidden(
                model,
                [w.input_ids for _, w in windows],
                pad_id=encoder.pad_id,
                separator_id=encoder.separator_id,
                device=device,
                cache=cache,
            )
            vectors = [
                found[p] for found, (_, w) in zip(by_window, windows, strict=True) for p in w.separator_positions
            ]
        else:
            Request = feature_cache_module.StepRequest
            per_window = feature_cache_module.step_vectors(
                model,
                [Request(w.input_ids, w.separator_positions, w.step_starts) for _, w in windows],
                pad_id=encoder.pad_id,
                device=device,
                cache=cache,
            )
            vectors = [vector for rows in per_window for vector in rows]
        if vectors:
            with torch.inference_mode():
                head = model.head
                stacked = torch.stack(vectors).to(device=head.weight.device, dtype=head.weight.dtype)
                probs = torch.softmax(head(stacked).float(), dim=-1).cpu().tolist()
            cursor = 0
            for solution_index, window in windows:
                for step_index in window.step_indices:
                    p = probs[cursor]
                    probabilities[solution_index][step_index] = (p[NEGATIVE], p[NEUTRAL], p[POSITIVE])
                    cursor += 1
        return _results(probabilities, reduction, neutral_as)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(windows), batch_size):
                chunk = windows[start : start + batch_size]
                input_ids, attention_mask = pad_batch([w.input_ids for _, w in chunk], encoder.pad_id)
                rows = torch.tensor([r for r, (_, w) in enumerate(chunk) for _ in w.separator_positions])
                cols = torch.tensor([p for _, w in chunk for p in w.separator_positions])
                starts = torch.tensor([s for _, w in chunk for s in w.step_starts])
                with feature_cache_module.inference_autocast(device):
                    logits = model(
                        input_ids.to(device),
                        attention_mask.to(device),
                        positions=(rows.to(device), cols.to(device)),
                        step_starts=starts.to(device),
                    ).logits
                probs = torch.softmax(logits.float(), dim=-1).cpu().tolist()
                cursor = 0
                for solution_index, window in chunk:
                    for step_index in window.step_indices:
                        p = probs[cursor]
                        probabilities[solution_index][step_index] = (p[NEGATIVE], p[NEUTRAL], p[POSITIVE])
                        cursor += 1
    finally:
        model.train(was_training)
    return _results(probabilities, reduction, neutral_as)


def _results(
    probabilities: Sequence[Sequence[tuple[float, float, float]]], reduction: Reduction, neutral_as: NeutralAs
) -> list[SolutionScore]:
    results: list[SolutionScore] = []
    for step_probs in probabilities:
        scores = tuple(step_score(p, neutral_as) for p in step_probs)
        results.append(
            SolutionScore(
                step_scores=scores, score=reduce_steps(scores, reduction), step_probabilities=tuple(step_probs)
            )
        )
    return results
