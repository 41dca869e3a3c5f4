"""Read-only views of PRM checkpoints and solution scores: the training and scoring services write them."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from activelearn.evaluation_summary import checkpoint_evaluation_rows
from activelearn.models import PRMCheckpoint, SolutionScore
from labeling.admin import FastListAdmin, ReadOnlyAdminMixin


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _pretty(value: Any) -> SafeString:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


@admin.register(PRMCheckpoint)
class PRMCheckpointAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "id",
        "base_model",
        "status",
        "trained_through_generation",
        "examples_seen",
        "threshold",
        "aggregation",
        "created_at",
    ]
    list_filter = ["status"]
    fields = readonly_fields = (
        "base_model",
        "status",
        "path",
        "trained_through_generation",
        "examples_seen",
        "duration_s",
        "threshold",
        "aggregation",
        "calibration_display",
        "evaluation_summary",
        "metrics_display",
        "evaluation_display",
        "hyperparameters_display",
        "error",
        "created_at",
        "finished_at",
    )

    @admin.display(description="metrics")
    def metrics_display(self, obj: PRMCheckpoint) -> SafeString:
        return _pretty(obj.metrics)

    @admin.display(description="chosen on validation")
    def calibration_display(self, obj: PRMCheckpoint) -> SafeString:
        return _pretty(obj.calibration)

    @admin.display(description="held-out evaluation")
    def evaluation_summary(self, obj: PRMCheckpoint) -> SafeString:
        rows = checkpoint_evaluation_rows(checkpoint=obj)
        if not rows:
            return format_html("{}", "not evaluated (manage.py evaluate_prm)")
        return format_html_join(
            "\n",
            "<p><b>{}</b>: {} labeled solutions; step AUROC {} (chance 0.5); first-error F1 {} "
            "(random at the prior {}, always no error 0); best-of-{} on {} problems ({} skipped): PRM {}, "
            "PRM-weighted {}, majority {}, random {}, oracle {}</p>",
            (
                (
                    r.key,
                    r.labeled_solutions,
                    _fmt(r.step_auroc),
                    _fmt(r.f1),
                    _fmt(r.f1_random),
                    r.n,
                    r.problems,
                    r.skipped,
                    _fmt(r.prm),
                    _fmt(r.weighted),
                    _fmt(r.majority),
                    _fmt(r.random),
                    _fmt(r.oracle),
                )
                for r in rows
            ),
        )

    @admin.display(description="evaluation (all numbers)")
    def evaluation_display(self, obj: PRMCheckpoint) -> SafeString:
        return _pretty(obj.evaluation)

    @admin.display(description="hyperparameters")
    def hyperparameters_display(self, obj: PRMCheckpoint) -> SafeString:
        return _pretty(obj.hyperparameters)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj)


@admin.register(SolutionScore)
class SolutionScoreAdmin(ReadOnlyAdminMixin, FastListAdmin):
    list_display = ["id", "solution", "checkpoint", "score", "reduction", "scored_at"]
    list_select_related = ["solution", "checkpoint"]
    list_filter = ["checkpoint"]
    search_fields = ["=solution__id"]
    fields = readonly_fields = ("solution", "checkpoint", "score", "reduction", "step_scores", "scored_at")
    ordering = ["-id"]
