"""The statistics of a comparison: labels to reach a quality, data efficiency between two
curves, means with their Student-t interval, and a paired bootstrap over seeds. Plain Python."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 2000


def labels_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """Labels at which a (labels, metric) curve first reaches ``target``, linearly
    interpolated between generations; None if it never does."""
    previous: tuple[float, float] | None = None
    for labels, value in curve:
        if value >= target:
            if previous is None or value == previous[1]:
                return labels  # reached at the first point: an upper bound, not interpolated
            x0, y0 = previous
            return x0 + (target - y0) * (labels - x0) / (value - y0)
        previous = (labels, value)
    return None


def data_efficiency(active: Sequence[tuple[float, float]], uniform: Sequence[tuple[float, float]]) -> float | None:
    """How many times fewer labels active selection needs for the same quality.

    If active reaches uniform's final quality at L labels: uniform's final labels / L (>= 1).
    Otherwise, if uniform reaches active's final quality at L: L / active's final labels
    (< 1). None when neither curve reaches the other's end point (e.g. both flat),
    and when uniform's final quality is already met at active's first point: both
    campaigns share that first (uniform) generation, so uniform never improved on
    it and the ratio would only measure the length of the run.
    """
    needed = labels_to_reach(active, uniform[-1][1])
    if needed is not None and needed <= active[0][0] and uniform[-1][0] > active[0][0]:
        return None
    if needed is not None and needed > 0:
        return uniform[-1][0] / needed
    needed = labels_to_reach(uniform, active[-1][1])
    if needed is not None and active[-1][0] > 0:
        return needed / active[-1][0]
    return None


def mean_curve(curves: Sequence[Sequence[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Point-wise mean of curves with the same number of generations (budget and metric)."""
    return [
        (statistics.fmean(c[i][0] for c in curves), statistics.fmean(c[i][1] for c in curves))
        for i in range(len(curves[0]))
    ]


# Two-sided 95% Student-t quantiles by degrees of freedom; past 30 the normal's 1.96.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile(degrees_of_freedom: int) -> float:
    return _T975[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T975) else 1.96


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval over the values); half-width 0 for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


@dataclass(frozen=True)
class Efficiency:
    on_mean_curves: float | None
    per_seed: list[float | None]
    # Percentile bootstrap over seeds of the factor on the mean curves; None when fewer
    # than half of the resamples had a defined factor.
    interval: tuple[float, float] | None
    undefined_resamples: int
    resamples: int


def bootstrap_efficiency(
    active: Sequence[Sequence[tuple[float, float]]],
    uniform: Sequence[Sequence[tuple[float, float]]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[tuple[float, float] | None, int]:
    """95% percentile interval of the mean-curve factor, resampling seeds with replacement.

    Paired: a resample takes the same seeds for both strategies (they share generation 0
    and the held-out set). Returns the interval (None if under half the resamples give a
    defined factor) and the number of resamples whose factor was undefined.
    """
    rng = random.Random(f"bootstrap:{seed}")
    count = len(active)
    factors: list[float] = []
    for _ in range(resamples):
        picks = [rng.randrange(count) for _ in range(count)]
        factor = data_efficiency(mean_curve([active[i] for i in picks]), mean_curve([uniform[i] for i in picks]))
        if factor is not None:
            factors.append(factor)
    undefined = resamples - len(factors)
    if len(factors) * 2 < resamples:
        return None, undefined
    factors.sort()
    low = factors[int(0.025 * (len(factors) - 1))]
    high = factors[math.ceil(0.975 * (len(factors) - 1))]
    return (low, high), undefined
