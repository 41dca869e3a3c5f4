"""Read-only views of PRM checkpoints and solution scores: the training and scoring services write them."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from activelearn.models import PRMCheckpoint, SolutionScore
from labeling.admin import FastListAdmin, ReadOnlyAdminMixin


def _pretty(value: Any) -> SafeString:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


@admin.register(PRMCheckpoint)
class PRMCheckpointAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["id", "base_model", "status", "trained_through_generation", "examples_seen", "created_at"]
    list_filter = ["status"]
    fields = readonly_fields = (
        "base_model",
        "status",
        "path",
        "trained_through_generation",
        "examples_seen",
        "duration_s",
        "metrics_display",
        "hyperparameters_display",
        "error",
        "created_at",
        "finished_at",
    )

    @admin.display(description="metrics")
    def metrics_display(self, obj: PRMCheckpoint) -> SafeString:
        return _pretty(obj.metrics)

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
