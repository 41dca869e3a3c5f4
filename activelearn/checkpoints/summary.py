"""Selector: the headline numbers of a checkpoint's stored evaluations, for the admin and
the dashboard (``PRMCheckpoint.evaluation`` holds the full JSON; docs/prm.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from activelearn.models import PRMCheckpoint


@dataclass(frozen=True)
class EvaluationRow:
    key: str  # the held-out set: "validation", "split:test", "generation:3", ...
    labeled_solutions: int
    step_auroc: float | None
    f1: float | None
    f1_random: float | None  # the random-at-the-prior baseline
    # Best-of-N at the largest N evaluated:
    n: int | None
    problems: int
    skipped: int
    prm: float | None
    weighted: float | None
    majority: float | None
    random: float | None
    oracle: float | None
    # 95 % bootstrap intervals ([low, high]; None in evaluations stored before them):
    # first-error F1 over solutions, best-of-N over problems, and the differences of the
    # PRM and of weighted vote to majority vote (paired: the same resampled problems).
    f1_ci: tuple[float, float] | None = None
    prm_ci: tuple[float, float] | None = None
    weighted_ci: tuple[float, float] | None = None
    majority_ci: tuple[float, float] | None = None
    prm_minus_majority_ci: tuple[float, float] | None = None
    weighted_minus_majority_ci: tuple[float, float] | None = None


def _get(values: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(values, dict):
            return None
        values = values.get(key)
    return values


def _interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return float(value[0]), float(value[1])
    return None


def checkpoint_evaluation_rows(*, checkpoint: PRMCheckpoint) -> list[EvaluationRow]:
    rows: list[EvaluationRow] = []
    for key, result in sorted((checkpoint.evaluation or {}).items()):
        if not isinstance(result, dict):
            continue  # an evaluation stored before results were keyed by held-out set
        table = result.get("best_of_n") or {}
        sizes = sorted((int(n) for n in table), reverse=True)
        top = table[str(sizes[0])] if sizes else {}
        rows.append(
            EvaluationRow(
                key=key,
                labeled_solutions=int(result.get("labeled_solutions") or 0),
                step_auroc=result.get("step_auroc"),
                f1=_get(result, "first_error", "f1"),
                f1_random=_get(result, "first_error_baselines", "random_at_prior", "f1"),
                n=sizes[0] if sizes else None,
                problems=int(top.get("problems") or 0),
                skipped=int(top.get("skipped") or 0),
                prm=top.get("prm"),
                weighted=top.get("weighted"),
                majority=top.get("majority"),
                random=top.get("random"),
                oracle=top.get("oracle"),
                f1_ci=_interval(_get(result, "first_error", "f1_ci")),
                prm_ci=_interval(top.get("prm_ci")),
                weighted_ci=_interval(top.get("weighted_ci")),
                majority_ci=_interval(top.get("majority_ci")),
                prm_minus_majority_ci=_interval(top.get("prm_minus_majority_ci")),
                weighted_minus_majority_ci=_interval(top.get("weighted_minus_majority_ci")),
            )
        )
    return rows
