"""The research admin of active learning: generations (start, retry, close), PRM checkpoints, solution scores.

Generations and solutions are labeling's tables; their admin pages here are
the ones that drive or show the pipeline. Checkpoints and scores are
read-only: the training and scoring services write them.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from activelearn.evaluation_summary import checkpoint_evaluation_rows
from activelearn.generation_report import generation_notes, generation_progress
from activelearn.models import PRMCheckpoint, SolutionScore
from activelearn.pipeline import (
    GenerationConfig,
    GenerationConfigError,
    PipelineError,
    generation_close,
    generation_retry,
    generation_start,
)
from labeling.admin import SolutionAdmin
from labeling.models import Generation, Solution
from labeling.staff.admin_base import FastListAdmin, ReadOnlyAdminMixin


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


# --- Generations --------------------------------------------------------------


class GenerationStartForm(forms.Form):
    number = forms.IntegerField(
        required=False, min_value=0, help_text="Leave empty for the next number after the highest one."
    )
    config = forms.JSONField(
        help_text="GenerationConfig as JSON (docs/active-learning.md); keys left out take their defaults."
    )

    def clean_config(self) -> Any:
        value = self.cleaned_data["config"]
        if not isinstance(value, dict):
            raise forms.ValidationError("The configuration is a JSON object.")
        try:
            return GenerationConfig.from_json(value)
        except (GenerationConfigError, TypeError, ValueError) as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Generation)
class GenerationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Generations are written by the pipeline; the admin starts, retries and closes them."""

    list_display = ["__str__", "phase", "status", "progress", "created_at", "started_at", "finished_at"]
    list_filter = ["phase", "status"]
    list_select_related = ["run"]
    actions = ["retry", "close"]
    change_list_template = "admin/labeling/generation/change_list.html"
    fields = readonly_fields = (
        "number",
        "phase",
        "status",
        "progress",
        "notes",
        "config",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    )

    @admin.display(description="progress")
    def progress(self, obj: Generation) -> SafeString:
        run = getattr(obj, "run", None)
        notes = generation_notes(generation=obj, run=run)
        line = generation_progress(generation=obj, run=run)
        if not notes:
            return format_html("{}", line)
        # An empty step is said on the list too, not only on the generation's page.
        return format_html('{}<br><strong class="generation-note">{}</strong>', line, notes[0])

    @admin.display(description="what happened")
    def notes(self, obj: Generation) -> SafeString:
        found = generation_notes(generation=obj, run=getattr(obj, "run", None))
        if not found:
            return format_html("{}", "Every step yielded what was asked." if obj.status in ("open", "closed") else "—")
        return format_html_join("\n", '<p class="generation-note">{}</p>', ((note,) for note in found))

    def get_urls(self) -> list[URLPattern]:
        start = path("start/", self.admin_site.admin_view(self.start_view), name="labeling_generation_start")
        return [start, *super().get_urls()]

    def start_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied
        form = GenerationStartForm(
            request.POST or None, initial={"config": GenerationConfig().to_json()} if request.method == "GET" else None
        )
        if request.method == "POST" and form.is_valid():
            try:
                generation = generation_start(number=form.cleaned_data["number"], config=form.cleaned_data["config"])
            except PipelineError as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, f"{generation} requested; its steps run on the workers.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:labeling_generation_changelist"))
        context = {**self.admin_site.each_context(request), "title": "Start a generation", "form": form}
        return TemplateResponse(request, "admin/labeling/generation/start.html", context)

    @admin.action(description="Retry the failed step of the selected generations")
    def retry(self, request: HttpRequest, queryset: QuerySet[Generation]) -> None:
        for generation in queryset:
            try:
                generation_retry(generation_id=generation.pk)
            except PipelineError as exc:
                self.message_user(request, f"{generation}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{generation}: retrying.", messages.SUCCESS)

    @admin.action(description="Close the selected generations (their tasks are no longer served)")
    def close(self, request: HttpRequest, queryset: QuerySet[Generation]) -> None:
        for generation in queryset:
            try:
                generation_close(generation_id=generation.pk)
            except PipelineError as exc:
                self.message_user(request, f"{generation}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{generation}: closed.", messages.SUCCESS)


# --- Solutions, with their PRM scores --------------------------------------------

# labeling's solution page, plus the latest PRM scores: registered again here so
# that labeling's admin needs nothing from this app.
admin.site.unregister(Solution)


@admin.register(Solution)
class ScoredSolutionAdmin(SolutionAdmin):
    fields = [f for name in SolutionAdmin.fields for f in ([name, "prm_scores"] if name == "grading_note" else [name])]
    readonly_fields = [*SolutionAdmin.readonly_fields, "prm_scores"]

    @admin.display(description="PRM scores")
    def prm_scores(self, obj: Solution) -> SafeString:
        latest = SolutionScore.objects.filter(solution=obj).select_related("checkpoint").order_by("-checkpoint_id")
        score = latest.first()
        if score is None:
            return format_html("<em>{}</em>", "not scored yet")
        steps = format_html_join(", ", "{}: {}", ((i + 1, f"{s:.3f}") for i, s in enumerate(score.step_scores)))
        return format_html(
            "{} ({}, checkpoint #{})<br>per step: {}", f"{score.score:.3f}", score.reduction, score.checkpoint_id, steps
        )
