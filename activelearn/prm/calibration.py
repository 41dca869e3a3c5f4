"""What a checkpoint decides on its validation solutions: first-error threshold, aggregation.

* **Threshold**: the P(step is fine) below which a step counts as the first error: the
  one that flags as many of the labelers' trajectory steps as there are first errors
  (``evaluation.prior_threshold``). Not the F1 maximiser (``evaluation.best_threshold``):
  with 9-22 error-free validation solutions that one jumps between peaks of the F1
  curve when a single solution changes. A fixed 0.5 flags nothing when the model's
  scores sit above it.
* **Aggregation**: how step scores become one solution score (``scoring.REDUCTIONS``),
  chosen by what the score is for: picking a solution. On the graded pool of the
  validation problems (``pool``: solutions the grader marked right or wrong, no human
  label needed), each aggregation's exact expected best-of-``CHOOSE_AT`` accuracy is
  computed and the highest wins; ties go to "min". The solution-level AUROC of each
  aggregation on the labelers' whole validation solutions is recorded beside it, but not
  used: on CHAMP it ranked "product" first on validation on a split where "product" then
  picked worst of the four. Without a pool of at least one problem with ``CHOOSE_AT``
  graded solutions the choice is "min", which unlike "product" does not reward short
  solutions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.data import LabeledSolution, OutcomeSolution, trajectory_with_first_error
from activelearn.prm.evaluation import FirstErrorMetrics, auroc, error_prior, expected_top_pick, prior_threshold
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import REDUCTIONS, NeutralAs, Reduction, reduce_steps, score_solutions

FALLBACK_AGGREGATION: Reduction = "min"
THRESHOLD_RULE = "error-prior quantile of the validation step scores"
AGGREGATION_RULE = "highest expected best-of-4 on the validation problems' graded pool"
# Best-of-4 rather than 16: more validation problems have 4 graded solutions than 16.
CHOOSE_AT = 4
# Graded solutions per validation problem scored to choose the aggregation (a fixed-seed
# sample): enough for best-of-4 to be told apart, bounded so a large pool costs little.
POOL_PER_PROBLEM = 16


@dataclass(frozen=True)
class Calibration:
    threshold: float
    first_error: FirstErrorMetrics  # on the validation trajectories, at ``threshold``
    aggregation: Reduction
    # Solution-level AUROC per aggregation (None: not computable), and on how many.
    aggregation_auroc: dict[str, float | None] = field(default_factory=dict)
    aggregation_solutions: int = 0
    aggregation_reason: str = ""
    # Expected best-of-CHOOSE_AT per aggregation on the graded validation pool (None: no pool).
    aggregation_best_of: dict[str, float | None] = field(default_factory=dict)
    pool_problems: int = 0
    pool_solutions: int = 0
    solutions: int = 0
    threshold_rule: str = THRESHOLD_RULE
    error_prior: float | None = None  # share of validation trajectory steps that are a first error

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def aggregation_aurocs(step_scores: Sequence[Sequence[float]], has_error: Sequence[bool]) -> dict[str, float | None]:
    """Per aggregation, how well whole solutions' scores separate error-free from erroneous
    (None without both kinds)."""
    if not step_scores or all(has_error) or not any(has_error):
        return {name: None for name in REDUCTIONS}
    fine = [not error for error in has_error]
    return {name: auroc([reduce_steps(s, name) for s in step_scores], fine) for name in REDUCTIONS}


def choose_aggregation(
    pool: Sequence[Sequence[tuple[Sequence[float], bool]]], n: int = CHOOSE_AT
) -> tuple[Reduction, dict[str, float | None], str]:
    """The aggregation whose top-scored solution is most often right in a random ``n`` of a
    problem's graded solutions, averaged over problems; ``pool`` holds, per problem, each
    solution's step scores and whether its answer is right. Problems with fewer than
    ``n`` solutions are left out; without any, "min"."""
    usable = [problem for problem in pool if len(problem) >= n]
    if not usable:
        table: dict[str, float | None] = {name: None for name in REDUCTIONS}
        return FALLBACK_AGGREGATION, table, f"no validation problem with {n} graded solutions: min by default"
    table = {
        name: sum(
            expected_top_pick([reduce_steps(steps, name) for steps, _ in problem], [ok for _, ok in problem], n)
            for problem in usable
        )
        / len(usable)
        for name in REDUCTIONS
    }
    # Ties go to the earlier name in REDUCTIONS ("min" first).
    best = max(REDUCTIONS, key=lambda name: (table[name] or 0.0, -REDUCTIONS.index(name)))
    return best, table, f"highest expected best-of-{n} on {len(usable)} validation problems' graded solutions"


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
) -> Calibration | None:
    """Threshold from labeled validation solutions, aggregation from the graded ``pool`` of
    the validation problems (see the module docstring); None without labeled solutions."""
    trajectories = [trajectory_with_first_error(solution) for solution in solutions]
    usable = [(s, t) for s, t in zip(solutions, trajectories, strict=True) if t[0]]
    if not usable:
        return None
    scored = score_solutions(
        model, tokenizer, [(s.problem, steps) for s, (steps, _) in usable], batch_size, "min", neutral_as
    )
    step_scores = [r.step_scores for r in scored]
    first_errors = [first for _, (_, first) in usable]
    threshold, metrics = prior_threshold(step_scores, first_errors)
    whole = [(s, first is not None) for s, (_, first) in usable if s.solution_steps]
    whole_scores = score_solutions(
        model, tokenizer, [(s.problem, s.solution_steps or ()) for s, _ in whole], batch_size, "min", neutral_as
    )
    aurocs = aggregation_aurocs([r.step_scores for r in whole_scores], [e for _, e in whole])
    sampled = pool_sample([s for s in pool if s.steps])
    pool_scores = score_solutions(
        model, tokenizer, [(s.problem, s.steps) for s in sampled], batch_size, "min", neutral_as
    )
    by_problem: dict[str, list[tuple[Sequence[float], bool]]] = {}
    for solution, result in zip(sampled, pool_scores, strict=True):
        by_problem.setdefault(solution.problem_id, []).append((result.step_scores, solution.correct))
    aggregation, best_of, reason = choose_aggregation(list(by_problem.values()))
    return Calibration(
        threshold=threshold,
        first_error=metrics,
        aggregation=aggregation,
        aggregation_auroc=aurocs,
        aggregation_solutions=len(whole),
        aggregation_reason=reason,
        aggregation_best_of=best_of,
        pool_problems=sum(len(problem) >= CHOOSE_AT for problem in by_problem.values()),
        pool_solutions=len(sampled),
        solutions=len(usable),
        error_prior=error_prior([len(s) for s in step_scores], first_errors),
    )
