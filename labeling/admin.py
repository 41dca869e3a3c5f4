"""The research admin: run a campaign from import to export.

List pages stay fast at release scale (a million step ratings, ~100k
assignments): every list names its ``list_select_related``, never filters or
sorts on JSON, does not ask for the unfiltered total (``show_full_result_count``)
or facet counts, and pages with ``EstimatedCountPaginator``, which reads
PostgreSQL's row estimate instead of counting an unfiltered table. Writes go
through the services (labeler status, gold); tasks and labels are read-only
here.
"""

from __future__ import annotations

import statistics
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from labeling.labelers import labeler_set_status
from labeling.models import (
    Assignment,
    AssignmentStatus,
    ExportJob,
    FinishReason,
    Generation,
    GoldStep,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Problem,
    Solution,
    StepRating,
    Task,
)
from labeling.quality.gold import GoldError, GoldStepSpec, gold_set

# Below this many rows an exact count is cheap and the estimate may be stale.
_ESTIMATE_ABOVE = 10_000

KATEX_MEDIA = forms.Media(
    css={"all": ["vendor/katex/katex.min.css"]},
    js=["vendor/katex/katex.min.js", "vendor/katex/auto-render.min.js", "js/admin-katex.js"],
)


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Unfiltered lists on PostgreSQL take the planner's row estimate (pg_class.reltuples) as their count.

    ``SELECT COUNT(*)`` over a million-row table is a full scan on every page
    view; the estimate is kept fresh by autovacuum/ANALYZE and only sizes the
    page links. Filtered lists, small tables and SQLite count exactly.
    """

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        if connection.vendor == "postgresql" and query is not None and not query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                    [query.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row is not None and row[0] is not None and row[0] > _ESTIMATE_ABOVE:
                return int(row[0])
        return int(super().count)


class FastListAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50


class ReadOnlyAdminMixin:
    """Rows written only by services: the admin shows them and changes nothing."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _steps_html(steps: list[str] | None, *, numbered_from: int = 1) -> SafeString:
    if not steps:
        return format_html("<em>{}</em>", "no steps (phase-1 placeholder)")
    items = format_html_join("", "<li value='{}'>{}</li>", ((i, s) for i, s in enumerate(steps, numbered_from)))
    return format_html('<ol class="math solution-steps">{}</ol>', items)


# --- Problems and solutions -------------------------------------------------


@admin.register(Problem)
class ProblemAdmin(FastListAdmin):
    list_display = ["unique_id", "subject", "level", "split", "created_at"]
    list_filter = ["split", "level", "subject"]
    # unique_id by prefix uses its unique index; problem text is scanned (MATH: ~12k rows).
    search_fields = ["^unique_id", "problem"]
    readonly_fields = ["problem_sha256", "created_at"]
    ordering = ["-id"]


class HasGoldFilter(admin.SimpleListFilter):
    title = "gold"
    parameter_name = "gold"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "gold"), ("no", "not gold")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        has_gold = Exists(GoldStep.objects.filter(solution=OuterRef("pk")))
        if self.value() == "yes":
            return queryset.filter(has_gold)
        if self.value() == "no":
            return queryset.filter(~has_gold)
        return queryset


@admin.register(Solution)
class SolutionAdmin(FastListAdmin):
    list_display = ["id", "problem", "source_model", "final_answer", "is_correct", "gold_link"]
    list_select_related = ["problem"]
    list_filter = ["is_correct", HasGoldFilter]
    search_fields = ["=problem__unique_id", "=id"]
    raw_id_fields = ["problem"]
    ordering = ["-id"]
    fields = [
        "problem",
        "problem_text",
        "steps_display",
        "final_answer",
        "source_model",
        "is_correct",
        "grading_note",
        "prm_scores",
        "gold_link",
        "created_at",
    ]
    readonly_fields = ["problem", "problem_text", "steps_display", "prm_scores", "gold_link", "created_at"]

    @property
    def media(self) -> forms.Media:
        return super().media + KATEX_MEDIA

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # solutions come from imports and the generator

    @admin.display(description="problem")
    def problem_text(self, obj: Solution) -> SafeString:
        return format_html('<div class="math">{}</div>', obj.problem.problem)

    @admin.display(description="steps")
    def steps_display(self, obj: Solution) -> SafeString:
        return _steps_html(obj.steps)

    @admin.display(description="PRM scores")
    def prm_scores(self, obj: Solution) -> SafeString:
        from activelearn.models import SolutionScore

        latest = SolutionScore.objects.filter(solution=obj).select_related("checkpoint").order_by("-checkpoint_id")
        score = latest.first()
        if score is None:
            return format_html("<em>{}</em>", "not scored yet")
        steps = format_html_join(", ", "{}: {}", ((i + 1, f"{s:.3f}") for i, s in enumerate(score.step_scores)))
        return format_html(
            "{} ({}, checkpoint #{})<br>per step: {}", f"{score.score:.3f}", score.reduction, score.checkpoint_id, steps
        )

    @admin.display(description="gold")
    def gold_link(self, obj: Solution) -> SafeString:
        if not obj.steps:
            return format_html("{}", "—")
        return format_html('<a href="{}">edit gold</a>', reverse("admin:labeling_solution_gold", args=[obj.pk]))

    def get_urls(self) -> list[URLPattern]:
        gold = path("<int:pk>/gold/", self.admin_site.admin_view(self.gold_view), name="labeling_solution_gold")
        return [gold, *super().get_urls()]

    def gold_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """One screen: every step of one solution with the ratings a gold answer accepts."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        solution = get_object_or_404(Solution.objects.select_related("problem"), pk=pk)
        steps: list[str] = solution.steps or []
        existing = {g.step_index: g for g in GoldStep.objects.filter(solution=solution)}
        if request.method == "POST":
            specs = [
                GoldStepSpec(
                    step_index=i,
                    negative_ok=request.POST.get(f"step-{i}-negative_ok") == "on",
                    neutral_ok=request.POST.get(f"step-{i}-neutral_ok") == "on",
                    positive_ok=request.POST.get(f"step-{i}-positive_ok") == "on",
                    note=request.POST.get(f"step-{i}-note", "").strip(),
                )
                for i in range(len(steps))
            ]
            try:
                gold_set(solution=solution, steps=specs)
            except GoldError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, f"Gold saved for {len(specs)} step(s) of solution {solution.pk}.")
                return HttpResponseRedirect(request.path)
        rows = [
            {
                "index": i,
                "number": i + 1,
                "text": text,
                "negative_ok": existing[i].negative_ok if i in existing else False,
                "neutral_ok": existing[i].neutral_ok if i in existing else True,
                "positive_ok": existing[i].positive_ok if i in existing else True,
                "note": existing[i].note if i in existing else "",
            }
            for i, text in enumerate(steps)
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Gold for solution {solution.pk}",
            "solution": solution,
            "rows": rows,
            "is_gold": bool(existing),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/labeling/solution/gold.html", context)


# --- Generations, tasks, assignments ---------------------------------------


class GenerationStartForm(forms.Form):
    number = forms.IntegerField(
        required=False, min_value=0, help_text="Leave empty for the next number after the highest one."
    )
    config = forms.JSONField(
        help_text="GenerationConfig as JSON (docs/active-learning.md); keys left out take their defaults."
    )

    def clean_config(self) -> Any:
        from activelearn.pipeline import GenerationConfig, GenerationConfigError

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
        "config",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    )

    @admin.display(description="progress")
    def progress(self, obj: Generation) -> str:
        run = getattr(obj, "run", None)
        if run is None:
            return ""
        return (
            f"step {run.step or '-'}; scored {run.scored}/{run.score_total}, graded {run.graded}/{run.grade_total}, "
            f"selected {run.selected}, QC {run.qc_injected}"
        )

    def get_urls(self) -> list[URLPattern]:
        start = path("start/", self.admin_site.admin_view(self.start_view), name="labeling_generation_start")
        return [start, *super().get_urls()]

    def start_view(self, request: HttpRequest) -> HttpResponse:
        from activelearn.pipeline import GenerationConfig, PipelineError, generation_start

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
        from activelearn.pipeline import PipelineError, generation_retry

        for generation in queryset:
            try:
                generation_retry(generation_id=generation.pk)
            except PipelineError as exc:
                self.message_user(request, f"{generation}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{generation}: retrying.", messages.SUCCESS)

    @admin.action(description="Close the selected generations (their tasks are no longer served)")
    def close(self, request: HttpRequest, queryset: QuerySet[Generation]) -> None:
        from activelearn.pipeline import PipelineError, generation_close

        for generation in queryset:
            try:
                generation_close(generation_id=generation.pk)
            except PipelineError as exc:
                self.message_user(request, f"{generation}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{generation}: closed.", messages.SUCCESS)


class AssignmentInline(ReadOnlyAdminMixin, admin.TabularInline):  # type: ignore[type-arg]
    model = Assignment
    fields = readonly_fields = ("link", "labeler", "status", "finish_reason", "submitted_at", "total_time_ms")
    extra = 0
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Assignment]:
        return super().get_queryset(request).select_related("labeler")

    @admin.display(description="assignment")
    def link(self, obj: Assignment) -> SafeString:
        return format_html('<a href="{}">{}</a>', reverse("admin:labeling_assignment_change", args=[obj.pk]), obj)


@admin.register(Task)
class TaskAdmin(FastListAdmin):
    list_display = ["id", "generation", "kind", "status", "priority", "labelers_needed", "problem_id_display"]
    list_select_related = ["generation", "solution__problem"]
    list_filter = ["status", "kind", "generation"]
    search_fields = ["=id", "=solution__problem__unique_id"]
    raw_id_fields = ["solution"]
    ordering = ["-id"]
    readonly_fields = [
        "generation",
        "solution",
        "kind",
        "is_quality_control",
        "serial",
        "verifier_score",
        "absent_question_keys",
        "created_at",
    ]
    inlines = [AssignmentInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tasks are created by selection and the gold services

    @admin.display(description="problem", ordering="solution__problem__unique_id")
    def problem_id_display(self, obj: Task) -> str:
        return obj.solution.problem.unique_id


class LabeledStepInline(ReadOnlyAdminMixin, admin.TabularInline):  # type: ignore[type-arg]
    model = LabeledStep
    fields = readonly_fields = ("number", "chosen_completion", "human_completion", "ratings_display")
    extra = 0

    def get_queryset(self, request: HttpRequest) -> QuerySet[LabeledStep]:
        return super().get_queryset(request).prefetch_related("ratings")

    @admin.display(description="step")
    def number(self, obj: LabeledStep) -> int:
        return obj.index + 1

    @admin.display(description="completions and ratings")
    def ratings_display(self, obj: LabeledStep) -> SafeString:
        marks = {1: "+1", 0: "0", -1: "-1", None: "unrated"}
        rows = format_html_join(
            "",
            '<tr><td>{}</td><td class="math">{}</td><td><strong>{}</strong></td><td>{}</td></tr>',
            (
                (
                    "own step" if r.completion_index == 0 else f"alt {r.completion_index}",
                    r.text,
                    marks.get(r.rating, r.rating),
                    "flagged" if r.flagged else "",
                )
                for r in obj.ratings.all()
            ),
        )
        return format_html('<table class="step-ratings">{}</table>', rows)


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdminMixin, FastListAdmin):
    list_display = ["id", "task", "generation_display", "labeler", "status", "finish_reason", "submitted_at"]
    list_select_related = ["task__generation", "labeler"]
    list_filter = ["status", "finish_reason"]
    search_fields = ["=id", "=task__id", "=labeler__uuid"]
    ordering = ["-id"]
    fields = readonly_fields = (
        "task",
        "labeler",
        "status",
        "problem_text",
        "started_at",
        "submitted_at",
        "total_time_ms",
        "finish_reason",
        "finish_reason_text",
    )
    inlines = [LabeledStepInline]

    @property
    def media(self) -> forms.Media:
        return super().media + KATEX_MEDIA

    def get_queryset(self, request: HttpRequest) -> QuerySet[Assignment]:
        return super().get_queryset(request).select_related("task__generation", "task__solution__problem", "labeler")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff) and super().has_view_permission(request, obj)

    @admin.display(description="generation", ordering="task__generation__number")
    def generation_display(self, obj: Assignment) -> str:
        return str(obj.task.generation)

    @admin.display(description="problem")
    def problem_text(self, obj: Assignment) -> SafeString:
        return format_html('<div class="math">{}</div>', obj.task.solution.problem.problem)


# --- Labelers ---------------------------------------------------------------


def _labeler_stats(queryset: QuerySet[Labeler]) -> QuerySet[Labeler]:
    """Per-labeler counts as correlated subqueries: one query for the page, no join fan-out."""
    submitted = Assignment.objects.filter(labeler=OuterRef("pk"), status=AssignmentStatus.SUBMITTED)

    def count(qs: QuerySet[Any]) -> Coalesce:
        return Coalesce(
            Subquery(qs.order_by().values("labeler_id").annotate(n=Count("pk")).values("n")[:1]),
            0,
            output_field=IntegerField(),
        )

    ratings = StepRating.objects.filter(
        step__assignment__labeler=OuterRef("pk"),
        step__assignment__status=AssignmentStatus.SUBMITTED,
        rating__isnull=False,
    )

    def rating_count(qs: QuerySet[Any]) -> Coalesce:
        return Coalesce(
            Subquery(qs.order_by().values("step__assignment__labeler_id").annotate(n=Count("pk")).values("n")[:1]),
            0,
            output_field=IntegerField(),
        )

    time_ms = Coalesce(
        Subquery(submitted.order_by().values("labeler_id").annotate(t=Sum("total_time_ms")).values("t")[:1]),
        0,
        output_field=IntegerField(),
    )
    return queryset.annotate(
        n_solutions=count(submitted),
        n_give_up=count(submitted.filter(finish_reason=FinishReason.GIVE_UP)),
        n_steps=rating_count(ratings),
        n_flagged=rating_count(ratings.filter(flagged=True)),
        time_ms=time_ms,
    )


def _rate(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "—"


class LabelerStatusForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=True, max_length=2000)


@admin.register(Labeler)
class LabelerAdmin(FastListAdmin):
    list_display = [
        "uuid",
        "user",
        "status",
        "exclude_labels",
        "solutions",
        "steps",
        "steps_per_hour",
        "flagged_rate",
        "give_up_rate",
    ]
    list_select_related = ["user"]
    list_filter = ["status", "exclude_labels"]
    search_fields = ["=uuid", "user__username"]
    ordering = ["-id"]
    fields = [
        "uuid",
        "user",
        "status",
        "status_reason",
        "status_changed_at",
        "exclude_labels",
        "solutions",
        "steps",
        "steps_per_hour",
        "median_seconds_per_step",
        "flagged_rate",
        "give_up_rate",
        "created_at",
    ]
    readonly_fields = [
        "uuid",
        "user",
        "status",
        "status_reason",
        "status_changed_at",
        "solutions",
        "steps",
        "steps_per_hour",
        "median_seconds_per_step",
        "flagged_rate",
        "give_up_rate",
        "created_at",
    ]
    actions = ["suspend", "reinstate"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Labeler]:
        return _labeler_stats(super().get_queryset(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a labeler row is made on a person's first sign-in

    def save_model(self, request: HttpRequest, obj: Labeler, form: Any, change: bool) -> None:
        # Only exclude_labels is editable here; status goes through the actions.
        Labeler.objects.filter(pk=obj.pk).update(exclude_labels=obj.exclude_labels)

    @admin.display(description="labeled solutions", ordering="n_solutions")
    def solutions(self, obj: Any) -> int:
        return int(obj.n_solutions)

    @admin.display(description="step labels", ordering="n_steps")
    def steps(self, obj: Any) -> int:
        return int(obj.n_steps)

    @admin.display(description="steps / hour")
    def steps_per_hour(self, obj: Any) -> str:
        return f"{obj.n_steps / (obj.time_ms / 3_600_000):.0f}" if obj.time_ms else "—"

    @admin.display(description="flagged")
    def flagged_rate(self, obj: Any) -> str:
        return _rate(obj.n_flagged, obj.n_steps)

    @admin.display(description="gave up")
    def give_up_rate(self, obj: Any) -> str:
        return _rate(obj.n_give_up, obj.n_solutions)

    @admin.display(description="median seconds / step")
    def median_seconds_per_step(self, obj: Labeler) -> str:
        per_assignment = (
            Assignment.objects.filter(labeler=obj, status=AssignmentStatus.SUBMITTED, total_time_ms__isnull=False)
            .annotate(n=Count("labeled_steps__ratings", filter=Q(labeled_steps__ratings__rating__isnull=False)))
            .filter(n__gt=0)
            .values_list("total_time_ms", "n")
        )
        values = [(ms or 0) / 1000 / n for ms, n in per_assignment]
        return f"{statistics.median(values):.1f}" if values else "—"

    def _set_status(
        self, request: HttpRequest, queryset: QuerySet[Labeler], status: LabelerStatus, verb: str
    ) -> HttpResponse | None:
        if "apply" in request.POST:
            form = LabelerStatusForm(request.POST)
            if form.is_valid():
                changed = sum(
                    labeler_set_status(
                        labeler=labeler,
                        status=status,
                        reason=form.cleaned_data["reason"],
                        changed_by=request.user,  # type: ignore[arg-type]
                    )
                    for labeler in queryset
                )
                self.message_user(request, f"{verb.capitalize()}ed {changed} labeler(s).")
                return None
        else:
            form = LabelerStatusForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{verb.capitalize()} labelers",
            "verb": verb,
            "action": request.POST.get("action", ""),
            "labelers": list(queryset),
            "form": form,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        }
        return TemplateResponse(request, "admin/labeling/labeler/set_status.html", context)

    @admin.action(description="Suspend selected labelers (with a reason)", permissions=["change"])
    def suspend(self, request: HttpRequest, queryset: QuerySet[Labeler]) -> HttpResponse | None:
        return self._set_status(request, queryset, LabelerStatus.SUSPENDED, "suspend")

    @admin.action(description="Reinstate selected labelers (with a reason)", permissions=["change"])
    def reinstate(self, request: HttpRequest, queryset: QuerySet[Labeler]) -> HttpResponse | None:
        return self._set_status(request, queryset, LabelerStatus.ACTIVE, "reinstate")


# --- Export jobs ------------------------------------------------------------


@admin.register(ExportJob)
class ExportJobAdmin(ReadOnlyAdminMixin, FastListAdmin):
    list_display = ["id", "format", "status", "records", "progress", "requested_by", "created_at", "finished_at"]
    list_select_related = ["requested_by"]
    list_filter = ["status", "format"]
    fields = readonly_fields = (
        "format",
        "status",
        "filters",
        "progress",
        "total",
        "records",
        "sha256",
        "path",
        "download",
        "error",
        "requested_by",
        "created_at",
        "started_at",
        "finished_at",
    )

    @admin.display(description="file")
    def download(self, obj: ExportJob) -> SafeString:
        if obj.status != "done":
            return format_html("{}", "—")
        return format_html('<a href="{}">download</a>', reverse("api-export-download", args=[obj.pk]))
