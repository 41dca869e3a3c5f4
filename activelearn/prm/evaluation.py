"""Offline metrics for a PRM: step AUROC, ProcessBench-style first error, best-of-N."""

from __future__ import annotations

import itertools
import math
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


# Scores this close to 0 or 1 are clipped before their logit is taken.
_LOGIT_EPS = 1e-6


def _logits(scores: Sequence[float]) -> np.ndarray:
    p = np.clip(np.asarray(scores, dtype=np.float64), _LOGIT_EPS, 1 - _LOGIT_EPS)
    return np.log(p) - np.log1p(-p)


def logit_spread(step_scores: Sequence[Sequence[float]]) -> float:
    """The standard deviation of the steps' score logits: the unit a threshold decay is
    given in, so that one decay means the same for heads whose logits differ in scale."""
    values = _logits([s for scores in step_scores for s in scores])
    return float(values.std()) if values.size else 0.0


def decayed_scores(step_scores: Sequence[Sequence[float]], decay: float) -> list[list[float]]:
    """Step scores as a first-error threshold that falls along the solution reads them.

    Step k is flagged when its score is below ``sigmoid(logit(threshold) - decay *
    log(1 + k))``, the same as when ``sigmoid(logit(score) + decay * log(1 + k))`` is below
    the threshold: these are the scores returned, so every threshold rule (the prior
    quantile, F1 and its interval) applies to them unchanged. Why a falling threshold: an
    error-free solution is right only if none of its steps is flagged, so a flat threshold
    charges long solutions for their length; on CHAMP (docs/prm.md) a decay chosen on
    validation raised test first-error F1. ``decay`` 0 returns the scores as they are.
    """
    if decay == 0:
        return [list(scores) for scores in step_scores]
    out = []
    for scores in step_scores:
        shifted = _logits(scores) + decay * np.log1p(np.arange(len(scores)))
        out.append((1.0 / (1.0 + np.exp(-shifted))).tolist())
    return out


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


def _threshold_candidates(step_scores: Sequence[Sequence[float]], candidates: int) -> np.ndarray:
    """Midpoints between neighbouring distinct step scores, thinned to at most ``candidates`` quantiles."""
    values = np.unique(np.asarray([s for scores in step_scores for s in scores], dtype=np.float64))
    if values.size == 0:
        raise ValueError("no step scores")
    midpoints = (values[:-1] + values[1:]) / 2 if values.size > 1 else values
    if midpoints.size > candidates:
        midpoints = np.unique(np.quantile(midpoints, np.linspace(0.0, 1.0, candidates)))
    return midpoints


def first_error_hits(
    step_scores: Sequence[Sequence[float]],
    first_errors: Sequence[int | None],
    thresholds: Sequence[float] | np.ndarray,
) -> np.ndarray:
    """``hits[i, j]``: solution i's first error is predicted exactly at ``thresholds[j]``.

    Step k is flagged when its score is below the threshold, so an erroneous solution
    (first error e) is hit for thresholds in (score[e], min(score[:e])], an error-free one
    for thresholds up to its lowest score: one interval per solution, which makes F1 at
    every threshold and every resample one matrix product.
    """
    if len(step_scores) != len(first_errors):
        raise ValueError("one first-error label per solution")
    cuts = np.asarray(thresholds, dtype=np.float64)
    low = np.empty(len(step_scores))
    high = np.empty(len(step_scores))
    for index, (scores, error) in enumerate(zip(step_scores, first_errors, strict=True)):
        if error is None:
            low[index], high[index] = -math.inf, min(scores, default=math.inf)
        else:
            if not 0 <= error < len(scores):
                raise ValueError(f"solution {index}: first error {error} outside its {len(scores)} step scores")
            low[index], high[index] = scores[error], min(scores[:error], default=math.inf)
    return (cuts[None, :] > low[:, None]) & (cuts[None, :] <= high[:, None])


def _f1_table(hits: np.ndarray, erroneous: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """First-error F1 per (weighting, threshold): ``weights`` (R x S) counts each solution
    in each resample; ``hits`` is S x T. A side with no solution scores 0, as in
    ``first_error_metrics``."""
    error_weight = weights[:, erroneous]
    clean_weight = weights[:, ~erroneous]
    error_total = error_weight.sum(axis=1, keepdims=True)
    clean_total = clean_weight.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        error_accuracy = np.where(error_total > 0, error_weight @ hits[erroneous] / error_total, 0.0)
        correct_accuracy = np.where(clean_total > 0, clean_weight @ hits[~erroneous] / clean_total, 0.0)
        total = error_accuracy + correct_accuracy
        return np.where(total > 0, 2 * error_accuracy * correct_accuracy / total, 0.0)


def best_threshold(
    step_scores: Sequence[Sequence[float]], first_errors: Sequence[int | None], candidates: int = 200
) -> tuple[float, FirstErrorMetrics]:
    """The threshold with the highest first-error F1 on these solutions (ties: the lower).

    Tried: midpoints between neighbouring distinct step scores, thinned to at most
    ``candidates`` quantiles. A PRM's probabilities are rarely centred on 0.5 (class
    imbalance, weighted losses), so a fixed 0.5 can flag nothing at all. On a hundred-odd
    solutions the maximiser swings with which ones were drawn; ``prior_threshold`` is the
    stable choice.
    """
    thresholds = _threshold_candidates(step_scores, candidates)
    hits = first_error_hits(step_scores, first_errors, thresholds)
    erroneous = np.asarray([e is not None for e in first_errors], dtype=bool)
    f1 = _f1_table(hits.astype(np.float64), erroneous, np.ones((1, len(first_errors))))[0]
    threshold = float(thresholds[int(np.argmax(f1))])
    return threshold, first_error_metrics(step_scores, first_errors, threshold)


def error_prior(step_counts: Sequence[int], first_errors: Sequence[int | None]) -> float:
    """The share of steps that are a first error: erroneous solutions over all steps of
    the trajectories (each ends at its first error, so it holds at most one)."""
    steps = sum(step_counts)
    return sum(e is not None for e in first_errors) / steps if steps else 0.0


def prior_threshold(
    step_scores: Sequence[Sequence[float]], first_errors: Sequence[int | None]
) -> tuple[float, FirstErrorMetrics]:
    """The threshold that flags as many steps as there are errors: the ``error_prior``
    quantile of every step score, and the metrics at it on these solutions.

    A threshold chosen to maximise F1 on a hundred-odd solutions is fitted to the 9-22
    error-free ones among them: F1 against the threshold has several near-equal peaks, and
    swapping one solution moves the maximum from one to another (bagging the F1 curve over
    bootstrap resamples did not help: the peaks stay). A quantile of all the steps, several
    hundred of them, moves little; measured on CHAMP's validation sets in docs/prm.md
    ("Scoring, grading, evaluation").
    """
    values = np.asarray([s for scores in step_scores for s in scores], dtype=np.float64)
    if values.size == 0:
        raise ValueError("no step scores")
    prior = error_prior([len(scores) for scores in step_scores], first_errors)
    threshold = float(np.quantile(values, prior))
    return threshold, first_error_metrics(step_scores, first_errors, threshold)


# ----------------------------------------------------------------- intervals

DEFAULT_RESAMPLES = 2000  # bootstrap resamples behind every interval
INTERVAL_LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its percentile-bootstrap interval (``INTERVAL_LEVEL``)."""

    value: float
    low: float
    high: float


def _percentiles(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tail = (1.0 - INTERVAL_LEVEL) / 2
    low, high = np.quantile(draws, [tail, 1.0 - tail], axis=-1)
    return low, high


def bootstrap_means(
    values: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means of each row of ``values`` (K x P: K quantities over the same P units, e.g.
    strategies over problems) and their bootstrap interval, units resampled with
    replacement. Every row sees the same resamples, so a difference of rows is paired."""
    if values.ndim != 2 or values.shape[1] == 0:
        raise ValueError("bootstrap needs a K x P table with at least one unit")
    rng = np.random.default_rng(seed)
    units = values.shape[1]
    means = np.empty((values.shape[0], resamples))
    # Chunked so the index matrix stays small for thousands of units.
    chunk = max(1, 200_000 // units)
    for start in range(0, resamples, chunk):
        index = rng.integers(0, units, size=(min(chunk, resamples - start), units))
        means[:, start : start + index.shape[0]] = values[:, index].mean(axis=2)
    low, high = _percentiles(means)
    return values.mean(axis=1), low, high


def first_error_interval(
    step_scores: Sequence[Sequence[float]],
    first_errors: Sequence[int | None],
    threshold: float,
    prior: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Estimate]:
    """First-error F1 at ``threshold`` and its lead over the random-at-prior baseline, each
    with a bootstrap interval over solutions (the same resamples for both: paired).

    The baseline's hits are its expected values per solution (``first_error_baselines``).
    """
    hits = first_error_hits(step_scores, first_errors, [threshold])[:, 0].astype(np.float64)
    p = min(1.0, max(0.0, prior))
    coin = np.asarray(
        [
            (1 - p) ** len(scores) if e is None else (1 - p) ** e * p
            for scores, e in zip(step_scores, first_errors, strict=True)
        ]
    )
    erroneous = np.asarray([e is not None for e in first_errors], dtype=bool)
    count = len(first_errors)
    rng = np.random.default_rng(seed)
    weights = np.stack(
        [np.ones(count)] + [np.bincount(rng.integers(0, count, count), minlength=count) for _ in range(resamples)]
    ).astype(np.float64)
    table = _f1_table(np.stack([hits, coin], axis=1), erroneous, weights)  # (1 + R) x 2
    model, baseline = table[:, 0], table[:, 1]
    f1_low, f1_high = _percentiles(model[1:])
    gap_low, gap_high = _percentiles(model[1:] - baseline[1:])
    return {
        "f1": Estimate(float(model[0]), float(f1_low), float(f1_high)),
        "f1_minus_random_at_prior": Estimate(float(model[0] - baseline[0]), float(gap_low), float(gap_high)),
    }


# ----------------------------------------------------------------- best-of-N

DEFAULT_DRAWS = 1000  # random subsets per problem for the votes (exact when fewer exist)


@dataclass(frozen=True)
class Candidate:
    score: float  # the solution score that picks (the checkpoint's chosen aggregation)
    answer: str
    is_correct: bool
    # Per-step scores, when known: best-of-N then also reports every aggregation.
    step_scores: tuple[float, ...] = ()
    # Candidates whose answers the grader takes for equal share a group
    # (``grading.equivalence``); None: the answer string is the group.
    group: str | None = None

    @property
    def vote_key(self) -> str:
        return self.answer if self.group is None else self.group


@dataclass(frozen=True)
class BestOfNResult:
    """Expected accuracies over every size-n subset of each problem's candidates, averaged
    over problems, with problem-bootstrap intervals (``estimates``) and the paired
    difference of each strategy to majority vote (``minus_majority``).

    Keys of ``estimates`` / ``per_problem``: "prm", "weighted", "majority", "random",
    "oracle", and "prm_<aggregation>" with step scores.
    """

    n: int
    draws: int  # random subsets per problem behind the votes (exact where fewer exist)
    prm_accuracy: float  # highest PRM score picks the answer (exact expectation)
    majority_accuracy: float  # most frequent answer group (ties share the credit)
    weighted_accuracy: float  # answer group with the largest summed score
    random_accuracy: float = 0.0  # a uniformly random pick (exact)
    oracle_accuracy: float = 0.0  # some candidate in the subset is correct (exact)
    problems: int = 0  # problems with at least n candidates, used
    skipped: int = 0  # problems with fewer than n candidates, not used
    # Highest aggregated step score picks, per aggregation (only with step scores).
    by_aggregation: dict[str, float] = field(default_factory=dict)
    votes_exact: int = 0  # problems whose votes were enumerated over every subset
    estimates: dict[str, Estimate] = field(default_factory=dict)
    minus_majority: dict[str, Estimate] = field(default_factory=dict)
    per_problem: dict[str, tuple[float, ...]] = field(default_factory=dict)


def expected_top_pick(scores: Sequence[float], correct: Sequence[bool], n: int) -> float:
    """P(the highest-scoring member of a uniformly random size-``n`` subset is correct),
    exactly, with ties broken uniformly at random.

    Order statistics: take the candidates with equal score as one tie group, g of them,
    b scoring strictly lower. The subset's maximum lies in the group unless all n members
    come from the b below it or the group is left out while something above is drawn:
    P = (C(b + g, n) - C(b, n)) / C(M, n). A random tie-break gives every member of the
    group an equal share of it. Without ties this is C(M - 1 - r, n - 1) / C(M, n) for the
    candidate at rank r (0 = the highest).
    """
    total = len(scores)
    if len(correct) != total:
        raise ValueError("one correctness flag per score")
    if not 1 <= n <= total:
        raise ValueError(f"a subset of {n} out of {total} candidates")
    order = sorted(range(total), key=lambda i: scores[i])
    subsets = math.comb(total, n)
    expected = 0.0
    below = 0
    start = 0
    while start < total:
        end = start
        while end < total and scores[order[end]] == scores[order[start]]:
            end += 1
        group = end - start
        right = sum(bool(correct[i]) for i in order[start:end])
        if right:
            expected += (math.comb(below + group, n) - math.comb(below, n)) / subsets * right / group
        below += group
        start = end
    return expected


def expected_oracle(correct: Sequence[bool], n: int) -> float:
    """P(a random size-``n`` subset holds a correct candidate): 1 - C(wrong, n) / C(M, n)."""
    if not 1 <= n <= len(correct):
        raise ValueError(f"a subset of {n} out of {len(correct)} candidates")
    wrong = sum(not c for c in correct)
    return 1.0 - math.comb(wrong, n) / math.comb(len(correct), n)


def vote_subsets(total: int, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Index rows of size-``n`` subsets: every subset when there are at most ``draws`` of
    them, else ``draws`` uniform random ones (without replacement within a row)."""
    if math.comb(total, n) <= draws:
        return np.asarray(list(itertools.combinations(range(total), n)), dtype=np.intp).reshape(-1, n)
    return np.argsort(rng.random((draws, total)), axis=1)[:, :n]


def expected_votes(candidates: Sequence[Candidate], subsets: np.ndarray) -> tuple[float, float]:
    """Mean accuracy of majority vote and of score-weighted vote over the rows of ``subsets``.

    Votes go to answer groups (``Candidate.vote_key``). A tie between groups splits the
    credit equally among them (the expectation of a random tie-break); a group is as right
    as the share of its members in the subset graded correct (1 or 0 unless the grader
    disagreed with itself on one answer).
    """
    keys: dict[str, int] = {}
    group = np.asarray([keys.setdefault(c.vote_key, len(keys)) for c in candidates], dtype=np.intp)
    right = np.asarray([c.is_correct for c in candidates], dtype=np.float64)
    score = np.asarray([c.score for c in candidates], dtype=np.float64)
    rows = np.repeat(np.arange(subsets.shape[0]), subsets.shape[1])
    members = group[subsets].ravel()
    shape = (subsets.shape[0], len(keys))
    counts = np.zeros(shape)
    np.add.at(counts, (rows, members), 1.0)
    correct = np.zeros(shape)
    np.add.at(correct, (rows, members), right[subsets].ravel())
    weighted = np.zeros(shape)
    np.add.at(weighted, (rows, members), score[subsets].ravel())
    present = counts > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(present, correct / counts, 0.0)

    def credit(totals: np.ndarray) -> float:
        totals = np.where(present, totals, -np.inf)
        best = totals.max(axis=1, keepdims=True)
        # Summed float scores: equal up to rounding is a tie.
        top = present & (totals >= best - 1e-12 * np.maximum(1.0, np.abs(best)))
        return float(((share * top).sum(axis=1) / top.sum(axis=1)).mean())

    return credit(counts), credit(weighted)


def best_of_n(
    problems: Sequence[Sequence[Candidate]],
    n: int,
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    aggregations: Sequence[Reduction] = ("min", "product"),
    resamples: int = DEFAULT_RESAMPLES,
    trials: int | None = None,
) -> BestOfNResult:
    """Expected best-of-``n`` accuracy of each strategy over every size-``n`` subset of
    each problem's candidates, averaged over problems, with 95 % problem-bootstrap
    intervals (``resamples``, seeded).

    Exact for every strategy that picks one candidate by its score (the PRM under each
    aggregation: ``expected_top_pick``), for random and for oracle. The votes are exact
    where a problem has at most ``draws`` subsets, else the mean over ``draws`` seeded
    random subsets, the same ones for majority and weighted vote (paired). A problem with
    fewer than ``n`` candidates is skipped and counted in ``skipped``, never filled with a
    smaller subset. With no problem left, every accuracy is NaN. ``trials`` is the former
    name of ``draws``.
    """
    if trials is not None:
        draws = trials
    if n < 1 or draws < 1:
        raise ValueError("best-of-N needs n >= 1 and draws >= 1")
    with_steps = bool(problems) and all(c.step_scores for candidates in problems for c in candidates)
    columns: dict[str, list[float]] = {}
    skipped = exact = 0
    for index, candidates in enumerate(problems):
        if len(candidates) < n:
            skipped += 1
            continue
        correct = [c.is_correct for c in candidates]
        row = {
            "prm": expected_top_pick([c.score for c in candidates], correct, n),
            "random": sum(correct) / len(correct),
            "oracle": expected_oracle(correct, n),
        }
        # Seeded per problem: a problem's draws do not depend on which others are present.
        subsets = vote_subsets(len(candidates), n, draws, np.random.default_rng([seed, index]))
        exact += math.comb(len(candidates), n) <= draws
        row["majority"], row["weighted"] = expected_votes(candidates, subsets)
        if with_steps:
            for aggregation in aggregations:
                picked = [reduce_steps(c.step_scores, aggregation) for c in candidates]
                row[f"prm_{aggregation}"] = expected_top_pick(picked, correct, n)
        for key, value in row.items():
            columns.setdefault(key, []).append(value)
    used = len(problems) - skipped
    estimates: dict[str, Estimate] = {}
    minus_majority: dict[str, Estimate] = {}
    if used:
        names = list(columns)
        table = np.asarray([columns[name] for name in names])
        reference = table[names.index("majority")]
        means, low, high = bootstrap_means(np.vstack([table, table - reference]), resamples=resamples, seed=seed)
        for position, name in enumerate(names):
            estimates[name] = Estimate(float(means[position]), float(low[position]), float(high[position]))
            if name != "majority":
                gap = position + len(names)
                minus_majority[name] = Estimate(float(means[gap]), float(low[gap]), float(high[gap]))

    def mean(key: str) -> float:
        return estimates[key].value if key in estimates else math.nan

    return BestOfNResult(
        n=n,
        draws=draws,
        prm_accuracy=mean("prm"),
        majority_accuracy=mean("majority"),
        weighted_accuracy=mean("weighted"),
        random_accuracy=mean("random"),
        oracle_accuracy=mean("oracle"),
        problems=used,
        skipped=skipped,
        by_aggregation={a: mean(f"prm_{a}") for a in aggregations} if with_steps else {},
        votes_exact=exact,
        estimates=estimates,
        minus_majority=minus_majority,
        per_problem={key: tuple(values) for key, values in columns.items()},
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
