"""What a checkpoint decides on its validation solutions: first-error threshold, aggregation.

* **Threshold**: the P(step is fine) below which a step counts as the first error: the
  one that flags as many of the labelers' trajectory steps as there are first errors
  (``evaluation.prior_threshold``). Not the F1 maximiser (``evaluation.best_threshold``):
  with 9-22 error-free validation solutions that one jumps between peaks of the F1
  curve when a single solution changes. A fixed 0.5 flags nothing when the model's
  scores sit above it.
* **Aggregation**: how step scores become one solution score (``scoring.REDUCTIONS``),
  chosen by the AUROC with which the aggregated score of each *whole* solution separates
  the ones labelers found an error in from the error-free ones. Whole solutions matter:
  a trajectory stops at its first error, which would hand the choice to "last". Another
  aggregation replaces "min" only by a margin (``AGGREGATION_MARGIN``). Without
  whole solutions, or without both kinds among them, the choice falls back to "min",
  which unlike "product" does not reward short solutions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.data import LabeledSolution, trajectory_with_first_error
from activelearn.prm.evaluation import FirstErrorMetrics, auroc, error_prior, prior_threshold
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import REDUCTIONS, NeutralAs, Reduction, reduce_steps, score_solutions

FALLBACK_AGGREGATION: Reduction = "min"
THRESHOLD_RULE = "error-prior quantile of the validation step scores"
# Another aggregation replaces "min" only when its validation AUROC is higher by more than
# this: on a hundred-odd validation solutions the AUROCs of the aggregations differ by
# noise, and "min", unlike "product", does not favour short solutions. (On CHAMP, product
# won by 0.007 on validation and then lost best-of-4 on test to min: 0.257 vs 0.347.)
AGGREGATION_MARGIN = 0.02


@dataclass(frozen=True)
class Calibration:
    threshold: float
    first_error: FirstErrorMetrics  # on the validation trajectories, at ``threshold``
    aggregation: Reduction
    # Solution-level AUROC per aggregation (None: not computable), and on how many.
    aggregation_auroc: dict[str, float | None] = field(default_factory=dict)
    aggregation_solutions: int = 0
    aggregation_reason: str = ""
    solutions: int = 0
    threshold_rule: str = THRESHOLD_RULE
    error_prior: float | None = None  # share of validation trajectory steps that are a first error

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def choose_aggregation(
    step_scores: Sequence[Sequence[float]], has_error: Sequence[bool]
) -> tuple[Reduction, dict[str, float | None], str]:
    """The aggregation whose solution scores best separate error-free from erroneous."""
    if not step_scores or all(has_error) or not any(has_error):
        table: dict[str, float | None] = {name: None for name in REDUCTIONS}
        return FALLBACK_AGGREGATION, table, "needs whole solutions both with and without an error"
    fine = [not error for error in has_error]
    table = {name: auroc([reduce_steps(s, name) for s in step_scores], fine) for name in REDUCTIONS}
    # Ties go to the earlier name in REDUCTIONS ("min" first).
    best = max(REDUCTIONS, key=lambda name: (table[name] or 0.0, -REDUCTIONS.index(name)))
    if (table[best] or 0.0) <= (table[FALLBACK_AGGREGATION] or 0.0) + AGGREGATION_MARGIN:
        return FALLBACK_AGGREGATION, table, f"no aggregation beats min by more than {AGGREGATION_MARGIN} AUROC"
    return best, table, "highest solution AUROC on validation, by more than the margin over min"


def calibrate(
    model: ProcessRewardModel,
    tokenizer: PreTrainedTokenizerBase,
    solutions: Sequence[LabeledSolution],
    *,
    neutral_as: NeutralAs = "positive",
    batch_size: int = 16,
) -> Calibration | None:
    """Threshold and aggregation from labeled validation solutions; None without any."""
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
    aggregation, table, reason = choose_aggregation([r.step_scores for r in whole_scores], [e for _, e in whole])
    return Calibration(
        threshold=threshold,
        first_error=metrics,
        aggregation=aggregation,
        aggregation_auroc=table,
        aggregation_solutions=len(whole),
        aggregation_reason=reason,
        solutions=len(usable),
        error_prior=error_prior([len(s) for s in step_scores], first_errors),
    )
