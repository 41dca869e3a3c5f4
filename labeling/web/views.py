"""Labeler pages. Each view: fetch and authorise, validate, one service call, render.

htmx requests get the ``task-panel`` fragment of ``labeling/task.html``; the
same URLs work as plain form posts that redirect (no JS needed).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import push_url
from django_htmx.middleware import HtmxDetails

from labeling.labelers import labeler_can_take_work, labeler_for_user
from labeling.models import Assignment, FinishReason, Labeler, LabelerStatus
from labeling.quality.control import labeler_screening_result
from labeling.web.forms import RateForm, ReasonForm
from labeling.work.assignment import (
    AssignmentClosed,
    AssignmentNotFound,
    NotFinished,
    RatingRejected,
    assignment_abandon,
)
from labeling.work.queue import LabelerMayNotWork, assignment_next
from labeling.work.rating import alternatives_generated_attach, assignment_submit_for_user, step_rate_for_user
from labeling.work.selectors import (
    assignment_current,
    assignments_of,
    assignments_of_user,
    labeler_stats,
    task_screen,
    task_screen_from,
)

VERSION_HEADER = "X-Rating-Version"


def _htmx(request: HttpRequest) -> bool:
    details: HtmxDetails | None = getattr(request, "htmx", None)  # set by HtmxMiddleware
    return bool(details)


def _labeler(request: HttpRequest) -> Labeler:
    assert request.user.is_authenticated  # login_required ran first
    return labeler_for_user(user=request.user)


def _own_assignment(request: HttpRequest, pk: int) -> Assignment:
    # Another labeler's assignment is indistinguishable from a missing one.
    return get_object_or_404(assignments_of(labeler=_labeler(request)), pk=pk)


def _refused(request: HttpRequest, message: str, *, status: int = 409) -> HttpResponse:
    if _htmx(request):
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    return render(request, "labeling/refused.html", {"message": message}, status=status)


def _task_response(
    request: HttpRequest, assignment: Assignment | None, *, status: int = 200, **extra: object
) -> HttpResponse:
    if assignment is not None and assignment.task.solution.steps is None:
        # A phase-1 task: its own screen (imported here: that module imports this one).
        from labeling.web.phase_one_views import phase_one_response

        return phase_one_response(request, assignment, status=status, **extra)
    pending = assignment is not None and alternatives_generated_attach(assignment=assignment)
    screen = task_screen(assignment=assignment) if assignment is not None else None
    template = "labeling/task.html#task-panel" if _htmx(request) else "labeling/task.html"
    context = {"screen": screen, "alternatives_pending": pending, **extra}
    response = render(request, template, context, status=status)
    if screen is not None:
        response[VERSION_HEADER] = f"{screen.assignment.pk}:{screen.version}"
    return response


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    labeler = _labeler(request)
    context = {
        "labeler": labeler,
        "may_work": labeler_can_take_work(labeler),
        "stats": labeler_stats(labeler=labeler),
        "current": assignment_current(labeler=labeler),
    }
    return render(request, "labeling/home.html", context)


@require_GET
def guide(request: HttpRequest) -> HttpResponse:
    return render(request, "labeling/guide.html")


@login_required
@require_POST
def next_task(request: HttpRequest) -> HttpResponse:
    labeler = _labeler(request)
    try:
        assignment = assignment_next(labeler=labeler)
    except LabelerMayNotWork:
        if labeler.status == LabelerStatus.FAILED_SCREENING:
            return redirect("screening-result")
        return _refused(
            request, f"Your account is {labeler.get_status_display()}: no tasks are handed out to it.", status=403
        )
    if assignment is None:
        messages.info(request, "No tasks are waiting for you right now. Please check back later.")
        return redirect("home")
    return redirect("task", pk=assignment.pk)


@login_required
@require_GET
def task(request: HttpRequest, pk: int) -> HttpResponse:
    return _task_response(request, _own_assignment(request, pk))


@login_required
@require_POST
def rate(request: HttpRequest, pk: int, step: int, completion: int) -> HttpResponse:
    assert request.user.is_authenticated  # login_required ran first
    form = RateForm(request.POST)
    if not form.is_valid():
        # Someone else's assignment answers 404 whatever the body says.
        get_object_or_404(assignments_of_user(user_id=request.user.pk), pk=pk)
        return _refused(request, "That rating could not be read; reload the page.", status=400)
    try:
        # Ownership is checked in the service's locking read: one query, not two.
        outcome = step_rate_for_user(
            assignment_id=pk,
            user_id=request.user.pk,
            step_index=step,
            completion_index=completion,
            rating=form.cleaned_data["rating"],
            flagged=form.cleaned_data["flagged"],
            version=form.cleaned_data["version"],
        )
    except AssignmentNotFound as exc:
        raise Http404("No such assignment.") from exc
    except (AssignmentClosed, RatingRejected) as exc:
        return _refused(request, str(exc))
    assignment = outcome.assignment
    if not _htmx(request):
        return redirect(reverse("task", args=[assignment.pk]) + f"#step-{step}")
    if outcome.ratings is None:
        # Steps were dropped or alternatives appeared: the whole panel, afresh.
        return _task_response(request, outcome.assignment)
    # The usual click: answer with the rated row, the step it revealed (if
    # any), the finish box and the cursor, swapped out of band; re-rendering
    # the whole panel on every click is what made a rating expensive.
    screen = task_screen_from(assignment=outcome.assignment, ratings=outcome.ratings)
    shown_before = min(outcome.stop_before, screen.step_count - 1)
    context = {
        "screen": screen,
        "rated": screen.completion(step, completion),
        "revealed": screen.rows[shown_before + 1 :],
    }
    response = render(request, "labeling/task.html#rated", context)
    response["HX-Reswap"] = "none"
    response[VERSION_HEADER] = f"{assignment.pk}:{screen.version}"
    return response


@login_required
@require_POST
def submit(request: HttpRequest, pk: int) -> HttpResponse:
    assert request.user.is_authenticated  # login_required ran first
    try:
        # Ownership is checked in the service's locking read, as for a rating.
        assignment_submit_for_user(assignment_id=pk, user_id=request.user.pk)
    except AssignmentNotFound as exc:
        raise Http404("No such assignment.") from exc
    except (AssignmentClosed, NotFinished) as exc:
        return _refused(request, str(exc))
    return _next_after_finish(request)


@login_required
@require_POST
def give_up(request: HttpRequest, pk: int) -> HttpResponse:
    return _abandon(request, pk, FinishReason.GIVE_UP)


@login_required
@require_POST
def bad_problem(request: HttpRequest, pk: int) -> HttpResponse:
    return _abandon(request, pk, FinishReason.BAD_PROBLEM)


def _abandon(request: HttpRequest, pk: int, reason: FinishReason) -> HttpResponse:
    assignment = _own_assignment(request, pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        # 422 is swapped in by htmx (see base.html's htmx-config), so the form
        # comes back with its error and the reason typed so far.
        return _task_response(request, assignment, status=422, reason_form=form, reason_kind=reason.value)
    try:
        assignment_abandon(assignment=assignment, finish_reason=reason, reason_text=form.cleaned_data["reason"])
    except (AssignmentClosed, RatingRejected) as exc:
        return _refused(request, str(exc))
    return _next_after_finish(request)


def _next_after_finish(request: HttpRequest) -> HttpResponse:
    # Finishing hands over the next task at once: the labeler asked for work
    # by starting, and keeps it until they stop.
    labeler = _labeler(request)
    try:
        following = assignment_next(labeler=labeler)
    except LabelerMayNotWork:
        following = None
    if following is None and labeler.status == LabelerStatus.FAILED_SCREENING:
        return _screening_redirect(request)
    if not _htmx(request):
        if following is None:
            messages.info(request, "Saved. No more tasks are waiting for you right now.")
            return redirect("home")
        return redirect("task", pk=following.pk)
    response = _task_response(request, following, finished=True)
    return push_url(response, reverse("task", args=[following.pk]) if following else reverse("home"))


# --- Screening (labeling.quality) ---------------------------------------------


def _screening_redirect(request: HttpRequest) -> HttpResponse:
    if _htmx(request):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = reverse("screening-result")
        return response
    return redirect("screening-result")


@login_required
@require_GET
def screening_result(request: HttpRequest) -> HttpResponse:
    """The labeler's own screening: progress, then the overall result (never per-item answers)."""
    labeler = _labeler(request)
    return render(
        request, "labeling/screening.html", {"labeler": labeler, "result": labeler_screening_result(labeler=labeler)}
    )
