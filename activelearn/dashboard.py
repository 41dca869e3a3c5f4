"""The staff dashboard's PRM panel: metrics of the newest checkpoints, as a chart and a table,
and their held-out evaluations beside the baselines.

Registered with labeling's dashboard (labeling.staff.panels) in
``ActivelearnConfig.ready()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from activelearn.evaluation_summary import checkpoint_evaluation_rows
from activelearn.models import PRMCheckpoint
from labeling.staff import charts


@dataclass(frozen=True)
class CheckpointMetrics:
    checkpoints: list[PRMCheckpoint]
    # metric name -> one value per checkpoint (None where that run lacks it).
    series: dict[str, list[float | None]]


def checkpoint_metrics(*, limit: int = 20) -> CheckpointMetrics:
    """Numeric top-level entries of ``PRMCheckpoint.metrics`` for the newest runs, oldest first."""
    checkpoints = list(
        PRMCheckpoint.objects.only(
            "id",
            "base_model",
            "status",
            "metrics",
            "trained_through_generation",
            "created_at",
            "threshold",
            "aggregation",
            "evaluation",
        ).order_by("-id")[:limit]
    )[::-1]
    names: list[str] = []
    for checkpoint in checkpoints:
        for key, value in (checkpoint.metrics or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key not in names:
                names.append(key)
    series: dict[str, list[float | None]] = {
        name: [_number((c.metrics or {}).get(name)) for c in checkpoints] for name in names
    }
    return CheckpointMetrics(checkpoints=checkpoints, series=series)


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def checkpoint_panel(request: HttpRequest) -> SafeString:
    metrics = checkpoint_metrics()
    context = {
        "chart": charts.line_chart(
            [f"#{c.pk}" for c in metrics.checkpoints], metrics.series, label="PRM metrics per checkpoint"
        ),
        "metrics": metrics,
        "metric_rows": [
            (c, [values[i] for values in metrics.series.values()]) for i, c in enumerate(metrics.checkpoints)
        ],
        # Held-out numbers beside their baselines, newest checkpoint first.
        "evaluation_rows": [
            (c, row) for c in reversed(metrics.checkpoints) for row in checkpoint_evaluation_rows(checkpoint=c)
        ],
    }
    # render_to_string escapes as any template does; the result is the panel's HTML.
    return mark_safe(render_to_string("activelearn/checkpoint_panel.html", context, request))
