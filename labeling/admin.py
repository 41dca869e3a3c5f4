"""The research admin of the labeling tables: problems, solutions and their gold, tasks, labels, labelers, exports.

List pages follow labeling.staff.admin_base (fast at release scale). Writes go
through the services (labeler status, gold); tasks and labels are read-only
here. Generations are started, retried and closed from activelearn's admin,
which drives the pipeline.
"""

from __future__ import annotations

import statistics
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from rest_framework.authtoken.admin import TokenAdmin as DrfTokenAdmin
from rest_framework.authtoken.models import TokenProxy

from labeling.api.authentication import token_stamp
from labeling.data.display import isolated
from labeling.labelers import labeler_set_status
from labeling.models import (
    GRADING_NO_ANSWER,
    GRADING_NO_REFERENCE,
    Assignment,
    ExportJob,
    GoldStep,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Problem,
    Solution,
    Task,
)
from labeling.quality.gold import GoldError, GoldStepSpec, gold_set
from labeling.staff.admin_base import KATEX_MEDIA, FastListAdmin, ReadOnlyAdminMixin, steps_html
from labeling.work.answer_display import answer_segments
from labeling.work.selectors import labeler_seconds_per_step, labelers_with_counts

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


class GradeFilter(admin.SimpleListFilter):
    """Answer grading's outcomes; "no answer found" is not a wrong answer."""

    title = "grade"
    parameter_name = "grade"
    _OUTCOMES = {
        "correct": Q(is_correct=True),
        "wrong": Q(is_correct=False),
        "no-answer": Q(is_correct__isnull=True, grading_note=GRADING_NO_ANSWER),
        "no-reference": Q(is_correct__isnull=True, grading_note=GRADING_NO_REFERENCE),
        "ungraded": Q(is_correct__isnull=True, grading_note=""),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("correct", "correct"),
            ("wrong", "wrong"),
            ("no-answer", GRADING_NO_ANSWER),
            ("no-reference", GRADING_NO_REFERENCE),
            ("ungraded", "not graded"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        outcome = self._OUTCOMES.get(self.value() or "")
        return queryset.filter(outcome) if outcome is not None else queryset


@admin.register(Solution)
class SolutionAdmin(FastListAdmin):
    list_display = ["id", "problem", "source_model", "final_answer", "grade", "gold_link"]
    list_select_related = ["problem"]
    list_filter = [GradeFilter, HasGoldFilter]
    search_fields = ["=problem__unique_id", "=id"]
    raw_id_fields = ["problem"]
    ordering = ["-id"]
    fields = [
        "problem",
        "problem_text",
        "reference_answer",
        "steps_display",
        "final_answer",
        "source_model",
        "generator",
        "source_key",
        "is_correct",
        "grading_note",
        "gold_link",
        "created_at",
    ]
    readonly_fields = ["problem", "problem_text", "reference_answer", "steps_display", "gold_link", "created_at"]

    @property
    def media(self) -> forms.Media:
        return super().media + KATEX_MEDIA

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # solutions come from imports and the generator

    @admin.display(description="grade", ordering="is_correct")
    def grade(self, obj: Solution) -> str:
        if obj.is_correct is not None:
            return "correct" if obj.is_correct else "wrong"
        return obj.grading_note or "not graded"

    # "problem" is the link to the problem's row; its text has a label of its own.
    @admin.display(description="problem statement")
    def problem_text(self, obj: Solution) -> SafeString:
        return format_html('<div class="math">{}</div>', isolated(obj.problem.problem))

    @admin.display(description="reference answer")
    def reference_answer(self, obj: Solution) -> SafeString:
        answer = obj.problem.answer
        if not answer:
            return format_html("<em>{}</em>", "none")
        # What answer_display reads as math is typeset; plain text ("sqrt(3)") is shown as written.
        return format_html_join(
            " ",
            "{}",
            (
                (format_html('<span class="math">\\({}\\)</span>', part) if kind == "math" else isolated(part),)
                for kind, part in answer_segments(answer)
            ),
        )

    @admin.display(description="steps")
    def steps_display(self, obj: Solution) -> SafeString:
        return steps_html(obj.steps)

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
    list_display = [
        "id",
        "generation",
        "kind",
        "selection_reason",
        "status",
        "priority",
        "labelers_needed",
        "problem_id_display",
    ]
    list_select_related = ["generation", "solution__problem"]
    list_filter = ["status", "kind", "selection_reason", "generation"]
    search_fields = ["=id", "=solution__problem__unique_id"]
    raw_id_fields = ["solution"]
    ordering = ["-id"]
    readonly_fields = [
        "generation",
        "solution",
        "kind",
        "selection_reason",
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
                    isolated(r.text),
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
        "finish_reason_text_display",
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
        return format_html('<div class="math">{}</div>', isolated(obj.task.solution.problem.problem))

    @admin.display(description="finish reason text")
    def finish_reason_text_display(self, obj: Assignment) -> SafeString:
        # Written by the labeler: isolated, hidden characters shown.
        return isolated(obj.finish_reason_text)


# --- Labelers ---------------------------------------------------------------


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
        return labelers_with_counts(super().get_queryset(request))

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
        values = labeler_seconds_per_step(labeler=obj)
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


# DRF's token admin, which also binds a token it issues to its user's current
# password, so that a password change revokes it (labeling.api.authentication).
admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class TokenAdmin(DrfTokenAdmin):  # type: ignore[misc]  # DRF ships no type information
    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        token_stamp(token=obj)
