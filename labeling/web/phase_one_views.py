"""Phase-1 task pages (labeling.work.phase_one). Each view: fetch and authorise, validate, one service call, render.

The task URL (``task``) shows this screen for a phase-1 assignment (labeling.web.respond
dispatches); these views take its clicks. htmx requests get the ``task-panel`` fragment
of ``labeling/phase_one.html``; without JS each form is a plain post that redirects.
Give up and bad problem are the phase-2 routes: they work for both phases.
"""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from labeling.models import Assignment
from labeling.web.forms import RateForm
from labeling.web.respond import (
    LabelerRequest,
    is_htmx,
    next_after_finish,
    own_assignment,
    phase_one_response,
    refused,
)
from labeling.work.assignment import MAX_VERSION, AssignmentClosed, RatingRejected
from labeling.work.phase_one import OWN_STEP, phase_one_continue, phase_one_rate, phase_one_retry


class ContinueForm(forms.Form):
    # "" = the default rule, "own" = the labeler's step, or a candidate's index.
    choice = forms.RegexField(regex=r"^(|own|\d{1,3})$", required=False)
    human = forms.CharField(required=False, strip=True, max_length=5000)
    version = forms.IntegerField(min_value=1, max_value=MAX_VERSION)

    def cleaned_choice(self) -> int | str | None:
        raw = self.cleaned_data.get("choice") or ""
        if raw == "":
            return None
        return OWN_STEP if raw == OWN_STEP else int(raw)


def _after_click(request: LabelerRequest, assignment: Assignment) -> HttpResponse:
    if not is_htmx(request):
        return redirect(reverse("task", args=[assignment.pk]) + "#current-step")
    assignment.refresh_from_db()
    return phase_one_response(request, assignment)


@login_required
@require_POST
def rate_candidate(request: LabelerRequest, pk: int, step: int, completion: int) -> HttpResponse:
    assignment = own_assignment(request, pk)
    form = RateForm(request.POST)
    if not form.is_valid():
        return refused(request, "That rating could not be read; reload the page.", status=400)
    try:
        phase_one_rate(
            assignment=assignment,
            step_index=step,
            completion_index=completion,
            rating=form.cleaned_data["rating"],
            flagged=form.cleaned_data["flagged"],
            version=form.cleaned_data["version"],
        )
    except (AssignmentClosed, RatingRejected) as exc:
        return refused(request, str(exc))
    return _after_click(request, assignment)


@login_required
@require_POST
def continue_step(request: LabelerRequest, pk: int, step: int) -> HttpResponse:
    assignment = own_assignment(request, pk)
    form = ContinueForm(request.POST)
    if not form.is_valid():
        return refused(request, "That choice could not be read; reload the page.", status=400)
    try:
        outcome = phase_one_continue(
            assignment=assignment,
            step_index=step,
            choice=form.cleaned_choice(),
            human_text=form.cleaned_data["human"],
            version=form.cleaned_data["version"],
        )
    except AssignmentClosed as exc:
        return refused(request, str(exc))
    except RatingRejected as exc:
        # 422 is swapped in: the panel comes back with the message and the step typed so far.
        return phase_one_response(
            request, assignment, status=422, continue_error=str(exc), human=form.cleaned_data["human"]
        )
    if outcome.finished is not None:
        return next_after_finish(request)
    return _after_click(request, assignment)


@login_required
@require_POST
def retry_candidates(request: LabelerRequest, pk: int, step: int) -> HttpResponse:
    assignment = own_assignment(request, pk)
    try:
        phase_one_retry(assignment=assignment, step_index=step)
    except (AssignmentClosed, RatingRejected) as exc:
        return refused(request, str(exc))
    return _after_click(request, assignment)
