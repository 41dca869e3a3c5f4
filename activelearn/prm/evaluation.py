"""Offline metrics for a PRM: step AUROC, ProcessBench-style first error, best-of-N."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.data import LabeledSolution, NeutralHandling, build_examples
from activelearn.prm.modeling import NEGATIVE, POSITIVE, ProcessRewardModel
from activelearn.prm.scoring import NeutralAs, score_solutions


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


@dataclass(frozen=True)
class Candidate:
    score: float
    answer: str
    is_correct: bool


@dataclass(frozen=True)
class BestOfNResult:
    n: int
    trials: int
    prm_accuracy: float  # highest PRM score picks the answer
    majority_accuracy: float  # most frequent answer (ties: the one seen first in the subset)
    weighted_accuracy: float  # answer with the largest summed PRM score


def _majority(subset: Sequence[Candidate], weights: Sequence[float]) -> bool:
    totals: dict[str, float] = {}
    correct: dict[str, bool] = {}
    for candidate, weight in zip(subset, weights, strict=True):
        totals[candidate.answer] = totals.get(candidate.answer, 0.0) + weight
        correct.setdefault(candidate.answer, candidate.is_correct)
    # max() keeps the first maximal key and dicts keep insertion order: first seen wins ties.
    best = max(totals, key=lambda answer: totals[answer])
    return correct[best]


def best_of_n(problems: Sequence[Sequence[Candidate]], n: int, trials: int = 10, seed: int = 0) -> BestOfNResult:
    """Mean accuracy over ``trials`` random size-``n`` subsets per problem (all when fewer)."""
    rng = random.Random(seed)
    prm = majority = weighted = 0.0
    count = 0
    for candidates in problems:
        if not candidates:
            continue
        for _ in range(trials):
            subset = rng.sample(list(candidates), min(n, len(candidates)))
            pick = max(subset, key=lambda c: c.score)
            prm += pick.is_correct
            majority += _majority(subset, [1.0] * len(subset))
            weighted += _majority(subset, [c.score for c in subset])
            count += 1
    if count == 0:
        raise ValueError("no candidates to evaluate")
    return BestOfNResult(n, trials, prm / count, majority / count, weighted / count)


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
