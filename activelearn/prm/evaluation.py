"""Offline metrics for a PRM: step AUROC, ProcessBench-style first error, best-of-N."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.data import LabeledSolution, NeutralHandling, build_examples
from activelearn.prm.modeling import NEGATIVE, POSITIVE, ProcessRewardModel
from activelearn.prm.scoring import NeutralAs, Reduction, reduce_steps, score_solutions


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve via the rank-sum (Mann-Whitney U) identity; ties count half."""
    values = np.asarray(scores, dtype=np.float64)
    truth = np.asarray(labels, dtype=bool)
    positives = int(truth.sum())
    negatives = int(truth.size - positives)
    if positives == 0 or negatives == 0:
        raise ValueError("AUROC needs at least one positive and one negative label")
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(values.size, dtype=np.float64)
    # Average rank within each run of equal scores is what makes ties count half.
    boundaries = np.flatnonzero(np.diff(sorted_values)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [values.size]))
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2.0
    rank_sum = float(ranks[truth].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


@dataclass(frozen=True)
class FirstErrorMetrics:
    error_accuracy: float  # erroneous solutions whose first error index was hit exactly
    correct_accuracy: float  # error-free solutions predicted error-free
    f1: float  # harmonic mean of the two, as in ProcessBench
    erroneous: int
    error_free: int


def predicted_first_error(step_scores: Sequence[float], threshold: float = 0.5) -> int | None:
    for index, score in enumerate(step_scores):
        if score < threshold:
            return index
    return None


def first_error_metrics(
    step_scores: Sequence[Sequence[float]],
    first_errors: Sequence[int | None],
    threshold: float = 0.5,
) -> FirstErrorMetrics:
    """``first_errors[i]`` is the 0-based index of solution i's first wrong step, None if none."""
    if len(step_scores) != len(first_errors):
        raise ValueError("one first-error label per solution")
    hits_error = total_error = hits_correct = total_correct = 0
    for scores, truth in zip(step_scores, first_errors, strict=True):
        predicted = predicted_first_error(scores, threshold)
        if truth is None:
            total_correct += 1
            hits_correct += predicted is None
        else:
            total_error += 1
            hits_error += predicted == truth
    error_accuracy = hits_error / total_error if total_error else 0.0
    correct_accuracy = hits_correct / total_correct if total_correct else 0.0
    denominator = error_accuracy + correct_accuracy
    f1 = 2 * error_accuracy * correct_accuracy / denominator if denominator else 0.0
    return FirstErrorMetrics(error_accuracy, correct_accuracy, f1, total_error, total_correct)


def first_error_baselines(
    lengths: Sequence[int], first_errors: Sequence[int | None], prior: float
) -> dict[str, FirstErrorMetrics]:
    """What a PRM has to beat on the same solutions (expected values, no sampling).

    * ``always_no_error``: never flags a step: every error-free solution right, every
      erroneous one wrong, F1 0.
    * ``random_at_prior``: flags each step independently with probability ``prior`` (the
      share of -1 steps): an erroneous solution is hit when its first ``e`` steps pass and
      step ``e`` is flagged, (1 - p)^e p; an error-free one of ``n`` steps when none is,
      (1 - p)^n.
    """
    if len(lengths) != len(first_errors):
        raise ValueError("one length per solution")
    erroneous = [e for e in first_errors if e is not None]
    clean = [n for n, e in zip(lengths, first_errors, strict=True) if e is None]
    never = FirstErrorMetrics(0.0, 1.0 if clean else 0.0, 0.0, len(erroneous), len(clean))
    p = min(1.0, max(0.0, prior))
    error_accuracy = sum((1 - p) ** e * p for e in erroneous) / len(erroneous) if erroneous else 0.0
    correct_accuracy = sum((1 - p) ** n for n in clean) / len(clean) if clean else 0.0
    denominator = error_accuracy + correct_accuracy
    f1 = 2 * error_accuracy * correct_accuracy / denominator if denominator else 0.0
    random_metrics = FirstErrorMetrics(error_accuracy, correct_accuracy, f1, len(erroneous), len(clean))
    return {"always_no_error": never, "random_at_prior": random_metrics}


def best_threshold(
    step_scores: Sequence[Sequence[float]], first_errors: Sequence[int | None], candidates: int = 200
) -> tuple[float, FirstErrorMetrics]:
    """The threshold with the highest first-error F1 on these solutions (ties: the lower).

    Tried: midpoints between neighbouring distinct step scores, thinned to at most
    ``candidates`` quantiles. A PRM's probabilities are rarely centred on 0.5 (class
    imbalance, weighted losses), so a fixed 0.5 can flag nothing at all.
    """
    values = np.unique(np.asarray([s for scores in step_scores for s in scores], dtype=np.float64))
    if values.size == 0:
        raise ValueError("no step scores")
    midpoints = (values[:-1] + values[1:]) / 2 if values.size > 1 else values
    if midpoints.size > candidates:
        midpoints = np.unique(np.quantile(midpoints, np.linspace(0.0, 1.0, candidates)))
    best: tuple[float, FirstErrorMetrics] | None = None
    for threshold in midpoints:
        metrics = first_error_metrics(step_scores, first_errors, float(threshold))
        if best is None or metrics.f1 > best[1].f1:
            best = (float(threshold), metrics)
    assert best is not None
    return best


@dataclass(frozen=True)
class Candidate:
    score: float  # the solution score that picks (the checkpoint's chosen aggregation)
    answer: str
    is_correct: bool
    # Per-step scores, when known: best-of-N then also reports every aggregation.
    step_scores: tuple[float, ...] = ()


@dataclass(frozen=True)
class BestOfNResult:
    n: int
    trials: int
    prm_accuracy: float  # highest PRM score picks the answer
    majority_accuracy: float  # most frequent answer (ties: the one seen first in the subset)
    weighted_accuracy: float  # answer with the largest summed PRM score
    random_accuracy: float = 0.0  # a uniformly random pick (expected value)
    oracle_accuracy: float = 0.0  # some candidate in the subset is correct
    problems: int = 0  # problems with at least n candidates, used
    skipped: int = 0  # problems with fewer than n candidates, not used
    # Highest aggregated step score picks, per aggregation (only with step scores).
    by_aggregation: dict[str, float] = field(default_factory=dict)


def _majority(subset: Sequence[Candidate], weights: Sequence[float]) -> bool:
    totals: dict[str, float] = {}
    correct: dict[str, bool] = {}
    for candidate, weight in zip(subset, weights, strict=True):
        totals[candidate.answer] = totals.get(candidate.answer, 0.0) + weight
        correct.setdefault(candidate.answer, candidate.is_correct)
    # max() keeps the first maximal key and dicts keep insertion order: first seen wins ties.
    best = max(totals, key=lambda answer: totals[answer])
    return correct[best]


def best_of_n(
    problems: Sequence[Sequence[Candidate]],
    n: int,
    trials: int = 10,
    seed: int = 0,
    aggregations: Sequence[Reduction] = ("min", "product"),
) -> BestOfNResult:
    """Mean accuracy over ``trials`` random size-``n`` subsets per problem.

    Every strategy sees the same subsets, so the comparison is paired. A problem with
    fewer than ``n`` candidates is skipped and counted in ``skipped``, never filled with
    a smaller subset. With no problem left, every accuracy is NaN.
    """
    rng = random.Random(seed)
    totals: dict[str, float] = {}
    count = used = skipped = 0
    with_steps = bool(problems) and all(c.step_scores for candidates in problems for c in candidates)

    def add(key: str, value: float) -> None:
        totals[key] = totals.get(key, 0.0) + value

    for candidates in problems:
        if len(candidates) < n:
            skipped += 1
            continue
        used += 1
        for _ in range(trials):
            subset = rng.sample(list(candidates), n)
            add("prm", max(subset, key=lambda c: c.score).is_correct)
            add("majority", _majority(subset, [1.0] * n))
            add("weighted", _majority(subset, [c.score for c in subset]))
            add("random", sum(c.is_correct for c in subset) / n)
            add("oracle", any(c.is_correct for c in subset))
            if with_steps:
                for aggregation in aggregations:
                    pick = max(subset, key=lambda c: reduce_steps(c.step_scores, aggregation))
                    add(f"agg:{aggregation}", pick.is_correct)
            count += 1

    def mean(key: str) -> float:
        return totals.get(key, 0.0) / count if count else math.nan

    return BestOfNResult(
        n=n,
        trials=trials,
        prm_accuracy=mean("prm"),
        majority_accuracy=mean("majority"),
        weighted_accuracy=mean("weighted"),
        random_accuracy=mean("random"),
        oracle_accuracy=mean("oracle"),
        problems=used,
        skipped=skipped,
        by_aggregation={a: mean(f"agg:{a}") for a in aggregations} if with_steps else {},
    )


@dataclass(frozen=True)
class StepAurocReport:
    auroc: float
    labeled_steps: int


def labeled_step_auroc(
    model: ProcessRewardModel,
    tokenizer: PreTrainedTokenizerBase,
    solutions: Sequence[LabeledSolution],
    *,
    neutral: NeutralHandling = "positive",
    neutral_as: NeutralAs = "positive",
    batch_size: int = 16,
) -> StepAurocReport:
    """Step-level AUROC of P(fine) against human labels on held-out solutions.

    ``neutral`` decides whether a 0-rated step counts as fine for the ground truth; with
    "own" neutral steps are left out, since a binary AUROC has no place for them.
    """
    examples = build_examples(solutions, "own")
    scored = score_solutions(model, tokenizer, [(e.problem, e.steps) for e in examples], batch_size, "min", neutral_as)
    scores: list[float] = []
    truths: list[bool] = []
    for example, result in zip(examples, scored, strict=True):
        for label, score in zip(example.labels, result.step_scores, strict=True):
            if label is None:
                continue
            if label == POSITIVE:
                truths.append(True)
            elif label == NEGATIVE:
                truths.append(False)
            elif neutral == "own":
                continue
            else:
                truths.append(neutral == "positive")
            scores.append(score)
    return StepAurocReport(auroc=auroc(scores, truths), labeled_steps=len(scores))
