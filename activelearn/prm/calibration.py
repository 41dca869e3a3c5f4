"""What a checkpoint decides on its validation solutions: first-error threshold, aggregation.

* **Threshold**: the P(step is fine) below which a step counts as the first error: the
  one that flags as many of the labelers' trajectory steps as there are first errors
  (``evaluation.prior_threshold``). Not the F1 maximiser (``evaluation.best_threshold``):
  with 9-22 error-free validation solutions that one jumps between peaks of the F1
  curve when a single solution changes. A fixed 0.5 flags nothing when the model's
  scores sit above it.
* **Aggregation**: how step scores become one solution score (``scoring.REDUCTIONS``),
  chosen by what the score is for: best-of-N on a problem's sampled solutions. On the
  graded pool of the validation problems (``pool``: solutions the grader marked right or
  wrong, no human label needed), each aggregation's exact expected best-of-``CHOOSE_AT``
  accuracy of the **weighted vote** (solution scores summed per answer group, the groups
  the grader's equivalence makes) is computed and the highest wins; ties go to "min".
  Weighted vote rather than the top pick, because it is the PRM's better best-of-N rule
  and the one an aggregation can ruin: on one CHAMP split the top pick preferred "product"
  by 0.009, and its weighted vote then fell 0.3 below majority vote on test; on that
  split's validation pool its weighted vote was already 0.07 below majority.
  Where the pool has no answer groups the top pick decides. The top pick's table, the
  validation majority vote and the solution-level AUROC of each aggregation on the
  labelers' whole validation solutions are recorded beside it, not used. Without a pool
  of at least one problem with ``CHOOSE_AT`` graded solutions the choice is "min", which
  unlike "product" does not reward short solutions. A recipe may fix the aggregation
  instead (``TrainConfig.aggregation``; ``small_causal`` does): then no pool is scored.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.data import LabeledSolution, OutcomeSolution, trajectory_with_first_error
from activelearn.prm.evaluation import (
    Candidate,
    FirstErrorMetrics,
    auroc,
    decayed_scores,
    error_prior,
    expected_top_pick,
    expected_votes,
    logit_spread,
    prior_threshold,
    vote_subsets,
)
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import REDUCTIONS, NeutralAs, Reduction, reduce_steps, score_solutions

FALLBACK_AGGREGATION: Reduction = "min"
THRESHOLD_RULE = "error-prior quantile of the validation step scores"
DECAYED_THRESHOLD_RULE = (
    "error-prior quantile of the validation step scores, the threshold's logit falling by "
    "decay x log(1 + step index) (evaluation.decayed_scores)"
)
FIXED_AGGREGATION = (
    "fixed by the training config (TrainConfig.aggregation: the recipe's or the caller's); no validation pool scored"
)
AGGREGATION_RULE = "highest expected best-of-4 weighted vote on the validation problems' graded pool"
# Best-of-4 rather than 16: more validation problems have 4 graded solutions than 16.
CHOOSE_AT = 4
# Graded solutions per validation problem scored to choose the aggregation (a fixed-seed
# sample): enough for best-of-4 to be told apart, bounded so a large pool costs little.
POOL_PER_PROBLEM = 16
# Subsets per problem for the validation vote: every one of C(16, 4) = 1,820 is enumerated.
VOTE_SUBSETS = 2000


@dataclass(frozen=True)
class Calibration:
    threshold: float
    first_error: FirstErrorMetrics  # on the validation trajectories, at ``threshold``
    aggregation: Reduction
    # Solution-level AUROC per aggregation (None: not computable), and on how many.
    aggregation_auroc: dict[str, float | None] = field(default_factory=dict)
    aggregation_solutions: int = 0
    aggregation_reason: str = ""
    # Expected best-of-CHOOSE_AT per aggregation on the graded validation pool (None: no
    # pool): the top pick, the weighted vote (empty without answer groups), and majority vote.
    aggregation_best_of: dict[str, float | None] = field(default_factory=dict)
    aggregation_vote: dict[str, float | None] = field(default_factory=dict)
    majority_vote: float | None = None
    pool_problems: int = 0
    pool_solutions: int = 0
    solutions: int = 0
    threshold_rule: str = THRESHOLD_RULE
    error_prior: float | None = None  # share of validation trajectory steps that are a first error
    # How far the threshold's logit falls along a solution, per log(1 + step index)
    # (evaluation.decayed_scores): in this model's logits, and as asked, in standard
    # deviations of the validation steps' logits (TrainConfig.threshold_decay).
    threshold_decay: float = 0.0
    threshold_decay_sd: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def aggregation_aurocs(step_scores: Sequence[Sequence[float]], has_error: Sequence[bool]) -> dict[str, float | None]:
    """Per aggregation, how well whole solutions' scores separate error-free from erroneous
    (None without both kinds)."""
    if not step_scores or all(has_error) or not any(has_error):
        return {name: None for name in REDUCTIONS}
    fine = [not error for error in has_error]
    return {name: auroc([reduce_steps(s, name) for s in step_scores], fine) for name in REDUCTIONS}


PoolEntry = tuple[Sequence[float], bool] | tuple[Sequence[float], bool, str | None]


@dataclass(frozen=True)
class AggregationChoice:
    aggregation: Reduction
    top_pick: dict[str, float | None]  # expected best-of-n of the top pick, per aggregation
    vote: dict[str, float | None]  # expected best-of-n weighted vote, per aggregation ({} without groups)
    majority: float | None  # expected best-of-n majority vote (None without groups)
    reason: str


def choose_aggregation(pool: Sequence[Sequence[PoolEntry]], n: int = CHOOSE_AT) -> AggregationChoice:
    """The aggregation whose weighted vote over a random ``n`` of a problem's graded
    solutions is most often right, averaged over problems; ``pool`` holds, per problem,
    each solution's step scores, whether its answer is right and its answer group. Where
    a solution has no group the top pick decides instead. Problems with fewer than ``n``
    solutions are left out; without any, "min"."""
    usable = [problem for problem in pool if len(problem) >= n]
    if not usable:
        return AggregationChoice(
            FALLBACK_AGGREGATION,
            {name: None for name in REDUCTIONS},
            {},
            None,
            f"no validation problem with {n} graded solutions: min by default",
        )
    top_pick: dict[str, float | None] = {
        name: sum(
            expected_top_pick([reduce_steps(e[0], name) for e in problem], [e[1] for e in problem], n)
            for problem in usable
        )
        / len(usable)
        for name in REDUCTIONS
    }
    keys = [[next(iter(e[2:]), None) for e in problem] for problem in usable]
    grouped = all(key is not None for problem in keys for key in problem)
    vote: dict[str, float | None] = {}
    majority: float | None = None
    if grouped:
        rng = np.random.default_rng(0)
        subsets = [vote_subsets(len(problem), n, VOTE_SUBSETS, rng) for problem in usable]
        for name in REDUCTIONS:
            results = [
                expected_votes(
                    [
                        Candidate(reduce_steps(e[0], name), str(key), e[1], group=str(key))
                        for e, key in zip(problem, problem_keys, strict=True)
                    ],
                    rows,
                )
                for problem, problem_keys, rows in zip(usable, keys, subsets, strict=True)
            ]
            vote[name] = sum(weighted for _, weighted in results) / len(usable)
            # Majority vote ignores the scores: the same under every aggregation.
            majority = sum(counted for counted, _ in results) / len(usable)
    table = vote if grouped else top_pick
    # Ties go to the earlier name in REDUCTIONS ("min" first).
    best = max(REDUCTIONS, key=lambda name: (table[name] or 0.0, -REDUCTIONS.index(name)))
    what = "weighted vote" if grouped else "top pick (no answer groups)"
    return AggregationChoice(
        best,
        top_pick,
        vote,
        majority,
        f"highest expected best-of-{n} {what} on {len(usable)} validation problems' graded solutions",
    )


def pool_sample(pool: Sequence[OutcomeSolution], per_problem: int = POOL_PER_PROBLEM) -> list[OutcomeSolution]:
    """At most ``per_problem`` solutions of each problem, drawn with a fixed seed, in input order."""
    by_problem: dict[str, list[int]] = {}
    for index, solution in enumerate(pool):
        by_problem.setdefault(solution.problem_id, []).append(index)
    keep: set[int] = set()
    for problem_id, indices in by_problem.items():
        chosen = indices if len(indices) <= per_problem else random.Random(problem_id).sample(indices, per_problem)
        keep.update(chosen)
    return [solution for index, solution in enumerate(pool) if index in keep]


def calibrate(
    model: ProcessRewardModel,
    tokenizer: PreTrainedTokenizerBase,
    solutions: Sequence[LabeledSolution],
    *,
    neutral_as: NeutralAs = "positive",
    batch_size: int = 16,
    pool: Sequence[OutcomeSolution] = (),
    aggregation: Reduction | None = None,
    threshold_decay: float = 0.0,
) -> Calibration | None:
    """Threshold from labeled validation solutions, aggregation from the graded ``pool`` of
    the validation problems (see the module docstring); None without labeled solutions.

    A fixed ``aggregation`` (a recipe's) is kept as given: neither the pool nor the labeled
    solutions beyond their first error are scored, which on a causal LM is most of what
    calibration costs. ``threshold_decay`` (in standard deviations of the validation steps'
    logits) makes the threshold fall along a solution; the prior quantile is then taken of
    the decayed scores, so it still flags as many validation steps as there are errors."""
    trajectories = [trajectory_with_first_error(solution) for solution in solutions]
    usable = [(s, t) for s, t in zip(solutions, trajectories, strict=True) if t[0]]
    if not usable:
        return None
    scored = score_solutions(
        model, tokenizer, [(s.problem, steps) for s, (steps, _) in usable], batch_size, "min", neutral_as
    )
    step_scores = [r.step_scores for r in scored]
    first_errors = [first for _, (_, first) in usable]
    decay = threshold_decay * logit_spread(step_scores)
    threshold, metrics = prior_threshold(decayed_scores(step_scores, decay), first_errors)
    fixed = Calibration(
        threshold=threshold,
        first_error=metrics,
        aggregation=aggregation or FALLBACK_AGGREGATION,
        aggregation_reason=FIXED_AGGREGATION,
        solutions=len(usable),
        error_prior=error_prior([len(s) for s in step_scores], first_errors),
        threshold_rule=DECAYED_THRESHOLD_RULE if decay else THRESHOLD_RULE,
        threshold_decay=decay,
        threshold_decay_sd=threshold_decay,
    )
    if aggregation is not None:
        return fixed
    whole = [(s, first is not None) for s, (_, first) in usable if s.solution_steps]
    whole_scores = score_solutions(
        model, tokenizer, [(s.problem, s.solution_steps or ()) for s, _ in whole], batch_size, "min", neutral_as
    )
    aurocs = aggregation_aurocs([r.step_scores for r in whole_scores], [e for _, e in whole])
    sampled = pool_sample([s for s in pool if s.steps])
    pool_scores = score_solutions(
        model, tokenizer, [(s.problem, s.steps) for s in sampled], batch_size, "min", neutral_as
    )
    by_problem: dict[str, list[PoolEntry]] = {}
    for solution, result in zip(sampled, pool_scores, strict=True):
        by_problem.setdefault(solution.problem_id, []).append((result.step_scores, solution.correct, solution.vote_key))
    choice = choose_aggregation(list(by_problem.values()))
    return replace(
        fixed,
        aggregation=choice.aggregation,
        aggregation_auroc=aurocs,
        aggregation_solutions=len(whole),
        aggregation_reason=choice.reason,
        aggregation_best_of=choice.top_pick,
        aggregation_vote=choice.vote,
        majority_vote=choice.majority,
        pool_problems=sum(len(problem) >= CHOOSE_AT for problem in by_problem.values()),
        pool_solutions=len(sampled),
    )
