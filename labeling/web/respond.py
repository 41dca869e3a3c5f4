"""What the labeler pages answer with, shared by the phase-2 and phase-1 views.

htmx requests get a fragment (the task panel, built by labeling.web.panel; a
plain text refusal); the same URLs work as plain form posts, which get whole pages
and redirects. Every task answer carries ``X-Rating-Version`` so that the page
can drop an answer older than one it already has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import orjson
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.template.loader import get_template
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django_htmx.http import push_url
from django_htmx.middleware import HtmxDetails

from annotate.paths import int_path
from labeling.labelers import labeler_for_user
from labeling.models import Assignment, Labeler, LabelerStatus
from labeling.quality.control import screening_outcome_note, screening_place
from labeling.web.forms import ReasonForm
from labeling.web.panel import finish_box_html, task_panel_html
from labeling.work.alternatives import alternatives_generated_attach
from labeling.work.assignment import AssignmentNotFound, assignment_for_labeler, is_phase_one
from labeling.work.phase_one import phase_one_screen
from labeling.work.queue import LabelerMayNotWork, assignment_next
from labeling.work.rating import Handout
from labeling.work.selectors import FinishBox, TaskScreen, task_screen, task_screen_from

VERSION_HEADER = "X-Rating-Version"


class LabelerRequest(HttpRequest):
    """A request that ``login_required`` let through: its user is signed in."""

    user: User


def is_htmx(request: HttpRequest) -> bool:
    details: HtmxDetails | None = getattr(request, "htmx", None)  # set by HtmxMiddleware
    return bool(details)


def _fragment(request: HttpRequest) -> bool:
    # htmx restoring a page it did not keep (Back) asks for the whole page.
    details: HtmxDetails | None = getattr(request, "htmx", None)
    return bool(details) and not (details and details.history_restore_request)


def fragment(request: HttpRequest, template_name: str, context: Mapping[str, object]) -> str:
    """A partial of a labeler template (``task.html#rated``), rendered without the context processors.

    The fragments use nothing the processors add (user, messages, request),
    only their forms' CSRF token, given here; running the processors cost
    more than rendering a small fragment itself. Whole
    pages keep ``render``: base.html shows the user and the messages.
    """
    return get_template(template_name).render({**context, "csrf_token": get_token(request)})


def finish_box(request: HttpRequest, finish: FinishBox) -> str:
    """The submit box for a state, as the key-press answer carries it (static/js/app.js swaps it in)."""
    # The CSRF token only where the box holds the submit form: masking one
    # for every key press would cost more than building the box.
    return finish_box_html(finish, csrf_token=get_token(request) if finish.ready_reason else "")


def json_answer(body: Mapping[str, object], *, status: int = 200) -> HttpResponse:
    """A JSON answer (the key presses'): orjson writes it in a third of the time JsonResponse's encoder takes."""
    return HttpResponse(orjson.dumps(body), status=status, content_type="application/json")


def labeler_of(request: LabelerRequest) -> Labeler:
    return labeler_for_user(user=request.user)


def own_assignment(request: LabelerRequest, pk: int) -> Assignment:
    """The signed-in labeler's assignment; 404 for a missing one and for another labeler's alike."""
    try:
        return assignment_for_labeler(user=request.user, pk=pk)
    except AssignmentNotFound as exc:
        raise Http404("No such assignment.") from exc


def refused(request: HttpRequest, message: str, *, status: int = 409) -> HttpResponse:
    if is_htmx(request):
        return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    return render(request, "labeling/refused.html", {"message": message}, status=status)


def task_response(
    request: HttpRequest,
    assignment: Assignment | None,
    *,
    status: int = 200,
    fresh: bool = False,
    finished: bool = False,
    reason_form: ReasonForm | None = None,
    reason_kind: str | None = None,
    note: str | None = None,
) -> HttpResponse:
    """The task screen of either phase (or the empty one), as a page or its ``task-panel`` fragment.

    ``fresh``: the assignment was leased in this request, so it has no
    ratings and nothing generated for it yet: the screen needs no query.
    ``finished``: this answers a finish (the screen says it was saved).
    ``reason_form``, ``reason_kind``: a reason to leave the task that was
    refused, shown again with its error. ``note``: what the finish decided
    (a screening passed), said in place of "Saved".
    """
    reasons = {"reason_form": reason_form, "reason_kind": reason_kind} if reason_form is not None else {}
    if assignment is not None and is_phase_one(assignment):
        return phase_one_response(request, assignment, status=status, finished=finished, note=note, **reasons)
    screen: TaskScreen | None
    if assignment is not None and fresh:
        pending, screen = False, task_screen_from(assignment=assignment, ratings=[])
    else:
        pending = assignment is not None and alternatives_generated_attach(assignment=assignment)
        screen = task_screen(assignment=assignment) if assignment is not None else None
    screening = screening_place(assignment=assignment) if assignment is not None else None
    if _fragment(request):
        panel = task_panel_html(
            screen,
            # No CSRF field in the forms: htmx sends the page's token with
            # every request it makes (base.html's hx-headers, which app.js's
            # key presses read too). The fields serve posts without
            # JavaScript, which get whole pages, never this fragment.
            csrf_token="",
            finished=finished,
            alternatives_pending=pending,
            reason_kind=reason_kind,
            reason_form=reason_form,
            note=note,
            screening=screening,
        )
        response = HttpResponse(panel, status=status)
    else:
        context = {
            "screen": screen, "alternatives_pending": pending, **reasons, "finished": finished, "note": note,
            "screening": screening,
        }  # fmt: skip
        response = render(request, "labeling/task.html", context, status=status)
    if screen is not None:
        response[VERSION_HEADER] = f"{screen.assignment.pk}:{screen.version}"
    return _not_kept(response)


def _not_kept(response: HttpResponse) -> HttpResponse:
    # A task page shown again by Back (or the back/forward cache) would show an
    # old state as editable: every task answer is fetched afresh instead.
    patch_cache_control(response, no_store=True, no_cache=True, must_revalidate=True, private=True)
    return response


def phase_one_response(
    request: HttpRequest, assignment: Assignment, *, status: int = 200, **extra: object
) -> HttpResponse:
    screen = phase_one_screen(assignment=assignment)
    template = "labeling/phase_one.html#task-panel" if _fragment(request) else "labeling/phase_one.html"
    response = render(request, template, {"screen": screen, **extra}, status=status)
    response[VERSION_HEADER] = f"{assignment.pk}:{screen.version}"
    return _not_kept(response)


def next_after_finish(request: HttpRequest, handout: Handout | None = None) -> HttpResponse:
    """The answer to a finish: the next task. ``handout``: already handed out with the finish (phase-2 submit)."""
    # Finishing hands over the next task at once: the labeler asked for work
    # by starting, and keeps it until they stop.
    fresh = False
    if handout is not None:
        labeler, following, fresh = handout.labeler, handout.following, handout.fresh
        decided = handout.screening_decided
    else:
        labeler = labeler_of(cast(LabelerRequest, request))  # a finish without a hand-out: a signed-in view
        before = labeler.status
        try:
            following = assignment_next(labeler=labeler)  # updates labeler.status where it decides screening
        except LabelerMayNotWork:
            following = None
        decided = before == LabelerStatus.SCREENING and labeler.status != LabelerStatus.SCREENING
    # The moment screening is decided is said there and then, passed or not.
    note = screening_outcome_note(labeler=labeler) if decided else None
    if following is None and labeler.status == LabelerStatus.FAILED_SCREENING:
        if note:
            messages.info(request, note)  # shown by the screening page the labeler is sent to
        return screening_redirect(request)
    if not is_htmx(request):
        if note:
            messages.success(request, note)
        if following is None:
            messages.info(request, "Saved. No more tasks are waiting for you right now.")
            return redirect("home")
        return redirect("task", pk=following.pk)
    response = task_response(request, following, fresh=fresh, finished=True, note=note)
    # int_path: reverse() walked the URL resolver on every submit + next.
    return push_url(response, int_path("task", following.pk) if following else reverse("home"))


def screening_redirect(request: HttpRequest) -> HttpResponse:
    if is_htmx(request):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = reverse("screening-result")
        return response
    return redirect("screening-result")
