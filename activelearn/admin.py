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

from activelearn.checkpoints.summary import checkpoint_evaluation_rows
from activelearn.generations.config import (
    INTEGER_MAX,
    K_MAX,
    SAMPLE_N_MAX,
    GenerationConfig,
    GenerationConfigError,
    PipelineError,
)
from activelearn.generations.pipeline import generation_close, generation_retry, generation_start
from activelearn.generations.report import generation_notes, generation_progress, generation_summary
from activelearn.models import PRMCheckpoint, SolutionScore
from activelearn.stepgen.phase_one import phase_one_open
from labeling.admin import SolutionAdmin
from labeling.models import Generation, Phase, Solution
from labeling.staff.admin_base import FastListAdmin, ReadOnlyAdminMixin


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _pretty(value: Any) -> SafeString:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


@admin.register(PRMCheckpoint)
class PRMCheckpointAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = [
        "id",
        "objective",
        "base_model",
        "status",
        "trained_through",
        "examples_seen",
        "threshold",
        "aggregation",
        "created_at",
    ]
    list_filter = ["status", "objective"]
    fields = readonly_fields = (
        "objective",
        "base_model",
        "status",
        "path",
        "trained_through",
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

    @admin.display(description="trained through generation", ordering="trained_through_generation")
    def trained_through(self, obj: PRMCheckpoint) -> str:
        if obj.trained_through_generation is not None:
            return str(obj.trained_through_generation)
        # Null: trained on every label there was (train_prm), or before any numbered generation.
        data = (obj.hyperparameters or {}).get("data") or {}
        return "every label at the time" if data.get("generations") is None else "the generations chosen (see data)"

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


# The GenerationConfig keys the start form gives fields of their own; the rest stay in its JSON.
FORM_KEYS = (
    "k", "per_problem", "wrong_share", "split", "sample_n", "qc_items", "overlap_share", "retrain", "base_model",
)  # fmt: skip
_SPLITS = [("any", "any split"), ("train", "train"), ("validation", "validation"), ("test", "test"), ("", "no split")]
_YES_NO = [("", "default"), ("yes", "yes"), ("no", "no")]


class GenerationStartForm(forms.Form):
    """A phase-2 generation (its common GenerationConfig keys as fields, the rest as JSON) or phase-1 work."""

    phase = forms.TypedChoiceField(
        choices=[(Phase.TWO, "phase 2: retrain, score, select convincing solutions"), (Phase.ONE, "phase 1")],
        coerce=int,
        required=False,
        empty_value=None,
        initial=Phase.TWO,
        help_text="Phase 1 opens problems, drawn uniformly from those not yet served in phase 1, for labelers to "
        "solve step by step from generated candidate steps (docs/step-generation.md); it uses K and split only.",
    )
    number = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=INTEGER_MAX,
        help_text="Phase 2. Leave empty for the next number after the highest one.",
    )
    k = forms.IntegerField(
        label="K",
        required=False,
        min_value=1,
        max_value=K_MAX,
        help_text="Solutions to select (phase 2; per problem with 'per problem'), problems to open (phase 1).",
    )
    per_problem = forms.TypedChoiceField(
        choices=_YES_NO, required=False, empty_value=None, coerce=lambda v: v == "yes", help_text="K per problem."
    )
    wrong_share = forms.FloatField(
        required=False, min_value=0.0, max_value=1.0, help_text="Share of convincing wrong-answer picks."
    )
    split = forms.ChoiceField(choices=_SPLITS, required=False, initial="any", help_text="Pool: problems of this split.")
    sample_n = forms.IntegerField(
        label="sample N per problem",
        required=False,
        min_value=0,
        max_value=SAMPLE_N_MAX,
        help_text="Phase 2. Draw N solutions per problem (of the split and problem_ids) from the generator first "
        "(SAMPLING_* settings, docs/operations.md) and select from those; empty or 0: off, the pool is the "
        "solutions already imported.",
    )
    qc_items = forms.IntegerField(
        label="QC items", required=False, min_value=0, help_text="Gold QC items added to the generation."
    )
    overlap_share = forms.FloatField(
        required=False, min_value=0.0, max_value=1.0, help_text="Share of tasks labeled twice (empty: OVERLAP_SHARE)."
    )
    retrain = forms.TypedChoiceField(
        choices=_YES_NO,
        required=False,
        empty_value=None,
        coerce=lambda v: v == "yes",
        help_text="Train a new checkpoint first; 'no' scores with checkpoint_id or the newest READY one.",
    )
    base_model = forms.CharField(
        required=False, max_length=500, help_text="Backbone to train from (empty: PRM_BACKBONE)."
    )
    config = forms.JSONField(
        label="other options",
        required=False,
        help_text="Phase 2: the other GenerationConfig keys as a JSON object (docs/active-learning.md); keys left "
        "out take their defaults. A key set both here and in its field must agree.",
    )

    def clean_config(self) -> dict[str, Any]:
        value = self.cleaned_data.get("config")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("The other options are a JSON object.")
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        values: dict[str, Any] = dict(cleaned.get("config") or {})
        for key in FORM_KEYS:
            given = cleaned.get(key)
            if given is None or (key in ("base_model",) and given == ""):
                continue
            if key == "split":
                given = None if given == "any" else given
                if given is None and "split" not in values:
                    continue
            if key in values and values[key] != given:
                raise forms.ValidationError(
                    f"{key} is {given!r} in its field but {values[key]!r} in the other options; set it in one place."
                )
            values[key] = given
        cleaned["values"] = values
        cleaned["phase"] = cleaned.get("phase") or Phase.TWO  # left out: phase 2, as before the choice
        if cleaned["phase"] == Phase.ONE:
            return cleaned
        try:
            cleaned["generation_config"] = GenerationConfig.from_json(values)
        except (GenerationConfigError, TypeError, ValueError) as exc:
            raise forms.ValidationError(str(exc)) from None
        return cleaned


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
        run = getattr(obj, "run", None)
        done = generation_summary(generation=obj, run=run)
        found = generation_notes(generation=obj, run=run)
        if not done and not found:
            return format_html("{}", "Nothing yet: the first step has not started.")
        return format_html_join(
            "\n",
            "<p{}>{}</p>",
            [*(("", line) for line in done), *((SafeString(' class="generation-note"'), note) for note in found)],
        )

    def get_urls(self) -> list[URLPattern]:
        start = path("start/", self.admin_site.admin_view(self.start_view), name="labeling_generation_start")
        return [start, *super().get_urls()]

    def start_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied
        defaults = GenerationConfig()
        initial = {key: getattr(defaults, key) for key in ("k", "wrong_share", "qc_items")}
        form = GenerationStartForm(request.POST or None, initial={**initial, "config": {}})
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                if data["phase"] == Phase.ONE:
                    values = data["values"]
                    opened = phase_one_open(
                        count=values.get("k", defaults.k),
                        split=values.get("split"),
                        problem_ids=values.get("problem_ids"),
                    )
                    message = f"phase 1: {opened.tasks} problem(s) opened for labeling"
                    if opened.tasks < values.get("k", defaults.k):
                        message += f" (only {opened.available} not yet served in phase 1)"
                else:
                    generation = generation_start(number=data["number"], config=data["generation_config"])
                    message = f"{generation} requested; its steps run on the workers."
            except PipelineError as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, message, messages.SUCCESS)
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
