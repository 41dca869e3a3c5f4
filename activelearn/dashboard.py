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

from activelearn.checkpoints.summary import checkpoint_evaluation_rows
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
            "objective",
            "status",
            "metrics",
            "trained_through_generation",
            "created_at",
            "threshold",
            "aggregation",
            "evaluation",
            "calibration",
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


def _count(value: object) -> object:
    # "epochs" is the list of per-epoch reports; its length is the count.
    return len(value) if isinstance(value, list) else value


def cell(value: object, digits: int = 3) -> str:
    """A table cell: integers as integers, other numbers to ``digits`` decimals, none as a dash."""
    if value is None or isinstance(value, bool):
        return "—"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 2):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


# The training metrics shown, by quantity: each chart draws one quantity on one axis.
LOSS_METRICS = ("train_loss_first", "train_loss_last", "val_loss")
COUNT_METRICS = (
    "train_solutions",
    "validation_solutions",
    "train_outcome_solutions",
    "val_labeled_steps",
    "optimizer_steps",
    "epochs",
)


@dataclass(frozen=True)
class CheckpointRow:
    checkpoint: PRMCheckpoint
    generation: int | None  # the generation that trained it (by number)
    held_out: str  # which evaluation the row's F1 / best-of-N come from
    auroc: float | None
    f1: float | None
    best_of_n: int | None
    prm: float | None
    majority: float | None
    losses: list[float | None]
    counts: list[object]


def checkpoint_rows(metrics: CheckpointMetrics) -> list[CheckpointRow]:
    """Per checkpoint: step AUROC, first-error F1 and best-of-N (PRM against majority vote).

    From the stored held-out evaluation (``evaluate_prm``; its validation set first) when
    there is one; otherwise AUROC from training's validation and F1 from the calibration
    on the same validation solutions, and no best-of-N (it needs a scored, graded pool).
    """
    from activelearn.models import GenerationRun

    trained_by = dict(
        GenerationRun.objects.filter(checkpoint__in=metrics.checkpoints).values_list(
            "checkpoint_id", "generation__number"
        )
    )
    rows: list[CheckpointRow] = []
    for c in metrics.checkpoints:
        evaluations = {r.key: r for r in checkpoint_evaluation_rows(checkpoint=c)}
        row = evaluations.get("validation") or next(iter(evaluations.values()), None)
        values = c.metrics or {}
        calibrated = (c.calibration or {}).get("first_error") or {}
        rows.append(
            CheckpointRow(
                checkpoint=c,
                generation=trained_by.get(c.pk),
                held_out=f"{row.key} ({row.labeled_solutions})"
                if row is not None
                else ("validation (training)" if values else "—"),
                auroc=row.step_auroc if row is not None else _number(values.get("val_auroc")),
                f1=row.f1 if row is not None else _number(calibrated.get("f1")),
                best_of_n=row.n if row is not None else None,
                prm=row.prm if row is not None else None,
                majority=row.majority if row is not None else None,
                losses=[_number(values.get(name)) for name in LOSS_METRICS],
                counts=[_count(values.get(name)) for name in COUNT_METRICS],
            )
        )
    return rows


def checkpoint_panel(request: HttpRequest) -> SafeString:
    metrics = checkpoint_metrics()
    rows = checkpoint_rows(metrics)
    # The kind in the label: an ORM sits beside the PRMs on the same axes.
    labels = [
        f"{'#' + str(r.checkpoint.pk) if r.generation is None else f'gen {r.generation}'} "
        f"{r.checkpoint.get_objective_display()}"
        for r in rows
    ]
    context = {
        "evaluation_chart": charts.line_chart(
            labels,
            {
                "step AUROC": [r.auroc for r in rows],
                "first-error F1": [r.f1 for r in rows],
                "best-of-N, PRM": [r.prm for r in rows],
                "best-of-N, majority": [r.majority for r in rows],
            },
            label="PRM evaluation per checkpoint (0 to 1)",
            top=1.0,
        ),
        "loss_chart": charts.line_chart(
            labels,
            {
                "train (first)": [r.losses[0] for r in rows],
                "train (last)": [r.losses[1] for r in rows],
                "validation": [r.losses[2] for r in rows],
            },
            label="PRM training loss per checkpoint",
        ),
        "rows": [
            (
                r,
                label,
                [cell(r.auroc), cell(r.f1), cell(r.best_of_n), cell(r.prm), cell(r.majority)],
                [cell(v) for v in r.counts],
            )
            for r, label in zip(rows, labels, strict=True)
        ][::-1],
        "count_names": [
            "train solutions",
            "validation solutions",
            "graded solutions (outcome labels)",
            "validation steps",
            "optimizer steps",
            "epochs",
        ],
    }
    # render_to_string escapes as any template does; the result is the panel's HTML.
    return mark_safe(render_to_string("activelearn/checkpoint_panel.html", context, request))


def generations_panel(request: HttpRequest) -> SafeString:
    """The newest generations by number, with their progress and every empty step in words."""
    from django.db.models import Count, Q

    from activelearn.generations.report import generation_notes, generation_progress
    from labeling.models import Generation, TaskKind

    generations = list(
        Generation.objects.filter(number__gte=0)
        .select_related("run")
        .annotate(n_tasks=Count("tasks", filter=Q(tasks__kind=TaskKind.NORMAL)))
        .order_by("-number")[:8]
    )
    rows = []
    for generation in generations:
        run = getattr(generation, "run", None)
        rows.append(
            {
                "generation": generation,
                "progress": generation_progress(generation=generation, run=run),
                "notes": generation_notes(generation=generation, run=run),
                "tasks": generation.n_tasks,
            }
        )
    return mark_safe(render_to_string("activelearn/generations_panel.html", {"rows": rows}, request))
