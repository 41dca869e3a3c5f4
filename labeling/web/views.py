"""Labeler pages and the phase-2 task. Each view: fetch and authorise, validate, one service call, render.

htmx requests get fragments of ``labeling/task.html``; the same URLs work as
plain form posts that redirect (no JS needed). What a view answers with is
built in labeling.web.respond, shared with the phase-1 views; the task URL
shows whichever screen the assignment's phase needs.
"""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from annotate.auth import session_user
from labeling.labelers import labeler_can_take_work, labeler_peek
from labeling.models import FinishReason, Labeler, LabelerStatus
from labeling.quality.control import labeler_screening_result
from labeling.web.forms import PressesInvalid, RateForm, ReasonForm, presses_from_json
from labeling.web.respond import (
    VERSION_HEADER,
    LabelerRequest,
    finish_box,
    fragment,
    is_htmx,
    json_answer,
    labeler_of,
    next_after_finish,
    own_assignment,
    refused,
    task_response,
)
from labeling.work.assignment import (
    AssignmentClosed,
    AssignmentNotFound,
    NotFinished,
    RatingRejected,
    assignment_abandon,
)
from labeling.work.queue import LabelerMayNotWork, assignment_next
from labeling.work.rating import (
    TaskChanged,
    assignment_submit_and_next,
    press_plain_apply,
    presses_apply,
    step_rate,
)
from labeling.work.selectors import FinishBox, LabelerStats, assignment_current, labeler_stats, task_screen_from


@login_required
@require_GET
def home(request: LabelerRequest) -> HttpResponse:
    labeler = labeler_peek(user=request.user)
    stored = labeler.pk is not None
    context = {
        "labeler": labeler,
        "may_work": labeler_can_take_work(labeler),
        "stats": labeler_stats(labeler=labeler) if stored else LabelerStats(0, 0, 0, 0),
        "current": assignment_current(labeler=labeler) if stored else None,
    }
    return render(request, "labeling/home.html", context)


@require_GET
def guide(request: HttpRequest) -> HttpResponse:
    return render(request, "labeling/guide.html")


@login_required
@require_POST
def next_task(request: LabelerRequest) -> HttpResponse:
    labeler = labeler_of(request)
    try:
        assignment = assignment_next(labeler=labeler)
    except LabelerMayNotWork:
        if labeler.status == LabelerStatus.FAILED_SCREENING:
            return redirect("screening-result")
        return refused(
            request, f"Your account is {labeler.get_status_display()}: no tasks are handed out to it.", status=403
        )
    if assignment is None:
        messages.info(request, "No tasks are waiting for you right now. Please check back later.")
        return redirect("home")
    return redirect("task", pk=assignment.pk)


@login_required
@require_GET
@never_cache
def task(request: LabelerRequest, pk: int) -> HttpResponse:
    return task_response(request, own_assignment(request, pk))


@login_required
@require_POST
def rate(request: LabelerRequest, pk: int, step: int, completion: int) -> HttpResponse:
    form = RateForm(request.POST)
    if not form.is_valid():
        # Someone else's assignment answers 404 whatever the body says.
        own_assignment(request, pk)
        return refused(request, "That rating could not be read; reload the page.", status=400)
    try:
        # Ownership is checked in the service's locking read: one query, not two.
        outcome = step_rate(
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
        return refused(request, str(exc))
    assignment = outcome.assignment
    if not is_htmx(request):
        return redirect(reverse("task", args=[assignment.pk]) + f"#step-{step}")
    if outcome.ratings is None:
        # Steps were dropped or alternatives appeared: the whole panel, afresh.
        return task_response(request, outcome.assignment)
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
    response = HttpResponse(fragment(request, "labeling/task.html#rated", context))
    response["HX-Reswap"] = "none"
    response[VERSION_HEADER] = f"{assignment.pk}:{screen.version}"
    return response


@require_POST
def presses(request: HttpRequest, pk: int) -> HttpResponse:
    """A batch of key presses from static/js/press-queue.js, applied in order; answers JSON.

    ``applied``: how many of the batch are stored, in order; ``refused``: why
    the rest are not (then the page shows the stored state); ``version``: the
    stored state version; ``current``: where the keyboard is, as the server
    sees it; ``finish_box``: the submit panel for that state.

    A single press of a session this process has verified is tried in one
    statement first (press_plain_apply), without loading the user; when it
    is not a plain press it is applied as any batch is, signed in as usual.
    """
    user = session_user(request)
    if user is not None:
        try:
            batch = presses_from_json(request.body)
        except PressesInvalid:
            batch = []
        if len(batch) == 1:
            plain = press_plain_apply(
                assignment_id=pk, user_id=user.id, password_hash=user.password_hash, press=batch[0]
            )
            if plain is not None:
                finish = FinishBox(assignment_id=pk, version=plain.version, progress=plain.progress)
                return json_answer(
                    {"applied": 1, "refused": None, "message": "", "version": plain.version, "reshaped": False,
                     "current": plain.progress.current_key, "finish_box": finish_box(request, finish)}
                )  # fmt: skip
    return _presses(cast(LabelerRequest, request), pk)


@login_required
def _presses(request: LabelerRequest, pk: int) -> HttpResponse:
    try:
        batch = presses_from_json(request.body)
    except PressesInvalid as exc:
        own_assignment(request, pk)  # someone else's assignment answers 404 whatever the body says
        return json_answer({"error": str(exc)}, status=400)
    try:
        outcome = presses_apply(assignment_id=pk, user_id=request.user.pk, presses=batch)
    except AssignmentNotFound as exc:
        raise Http404("No such assignment.") from exc
    except RatingRejected as exc:
        return json_answer({"error": str(exc)}, status=400)
    except AssignmentClosed as exc:
        return json_answer({"applied": 0, "refused": "closed", "message": str(exc)}, status=409)
    screen = task_screen_from(assignment=outcome.assignment, ratings=outcome.ratings)
    body = {
        "applied": outcome.applied,
        "refused": outcome.refusal.value if outcome.refusal else None,
        "message": outcome.message,
        "version": screen.version,
        "reshaped": outcome.reshaped,
        "current": screen.current_key,
        "finish_box": finish_box(request, screen.finish),
    }
    return json_answer(body, status=409 if outcome.refusal else 200)


@require_POST
def submit(request: HttpRequest, pk: int) -> HttpResponse:
    """Finish the task and answer with the next one, handed out in the same transaction.

    Ownership is checked in the service's locking read, as for a key press. A
    session this process verified goes without loading the user or the
    labeler (annotate.auth.SessionUser): the locking read checks the user too,
    and the labeler row travels with it; anything it does not find goes the
    usual way, which signs out a session whose user changed.
    """
    raw = request.POST.get("version", "")
    version = int(raw) if raw.isdigit() else None
    user = session_user(request)
    if user is not None:
        answer = _submitted(request, pk, version, user_id=user.id, labeler=None, password_hash=user.password_hash)
        if answer is not None:
            return answer
    return _submit_signed_in(cast(LabelerRequest, request), pk, version)


@login_required
def _submit_signed_in(request: LabelerRequest, pk: int, version: int | None) -> HttpResponse:
    answer = _submitted(request, pk, version, user_id=request.user.pk, labeler=labeler_of(request))
    if answer is None:
        raise Http404("No such assignment.")
    return answer


def _submitted(
    request: HttpRequest,
    pk: int,
    version: int | None,
    *,
    user_id: int,
    labeler: Labeler | None,
    password_hash: str | None = None,
) -> HttpResponse | None:
    """Submit + next's answer; None when the assignment is not found as the signed-in user's."""
    try:
        handout = assignment_submit_and_next(
            assignment_id=pk, user_id=user_id, labeler=labeler, version=version, password_hash=password_hash
        )
    except AssignmentNotFound:
        return None
    except (AssignmentClosed, NotFinished, TaskChanged) as exc:
        return refused(request, str(exc))
    return next_after_finish(request, handout)


@login_required
@require_POST
def give_up(request: LabelerRequest, pk: int) -> HttpResponse:
    return _abandon(request, pk, FinishReason.GIVE_UP)


@login_required
@require_POST
def bad_problem(request: LabelerRequest, pk: int) -> HttpResponse:
    return _abandon(request, pk, FinishReason.BAD_PROBLEM)


def _abandon(request: LabelerRequest, pk: int, reason: FinishReason) -> HttpResponse:
    assignment = own_assignment(request, pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        # 422 is swapped in by htmx (see base.html's htmx-config), so the form
        # comes back with its error and the reason typed so far.
        return task_response(request, assignment, status=422, reason_form=form, reason_kind=reason.value)
    try:
        assignment_abandon(assignment=assignment, finish_reason=reason, reason_text=form.cleaned_data["reason"])
    except (AssignmentClosed, RatingRejected) as exc:
        return refused(request, str(exc))
    return next_after_finish(request)


# --- Screening (labeling.quality.control) ------------------------------------


@login_required
@require_GET
def screening_result(request: LabelerRequest) -> HttpResponse:
    """The labeler's own screening: progress, then the overall result (never per-item answers)."""
    labeler = labeler_peek(user=request.user)
    if labeler.pk is None:
        return redirect("home")  # never asked for work: no screening to show
    return render(
        request, "labeling/screening.html", {"labeler": labeler, "result": labeler_screening_result(labeler=labeler)}
    )
