"""Phase 2: alternatives generated for the error step when none are stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from labeling.models import (
    Assignment,
    CandidateSetStatus,
    FinishReason,
    StepAlternative,
    StepCandidateSet,
    StepRating,
)
from labeling.work.assignment import NotFinished
from labeling.work.queue import assignment_next
from labeling.work.rating import assignment_submit, step_rate
from tests.labeling.workflow_factories import STEPS, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def generator_configured(settings):
    # The worker is not started here: the candidate set it would fill is
    # written by the test, and the queued message is captured, not sent.
    settings.STEPGEN_BACKEND = "openai"
    settings.STEPGEN_OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.STEPGEN_OPENAI_MODEL = "sampler"


def _rate_until_error(assignment: Assignment, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False) as queued:
        step_rate(
            assignment_id=assignment.pk,
            user_id=None,
            step_index=0,
            completion_index=0,
            rating=1,
            flagged=False,
            version=1,
        )
        step_rate(
            assignment_id=assignment.pk,
            user_id=None,
            step_index=1,
            completion_index=0,
            rating=-1,
            flagged=False,
            version=2,
        )
    assert len(queued) == 1  # one generation task, queued after commit


def test_it_asks_for_alternatives_and_waits_for_them(generator_configured, django_capture_on_commit_callbacks):
    make_task(generation=make_generation())
    assignment = assignment_next(labeler=make_labeler())

    _rate_until_error(assignment, django_capture_on_commit_callbacks)

    pending = StepCandidateSet.objects.get(assignment=assignment, step_index=1)
    assert pending.status == CandidateSetStatus.PENDING
    with pytest.raises(NotFinished, match="still being generated"):
        assignment_submit(assignment_id=assignment.pk, user_id=None)


def test_it_shows_ready_alternatives_rates_them_and_exports_them(
    generator_configured, django_capture_on_commit_callbacks, tmp_path: Path
) -> None:
    make_task(generation=make_generation())
    labeler = make_labeler()
    assignment = assignment_next(labeler=labeler)
    _rate_until_error(assignment, django_capture_on_commit_callbacks)
    client = Client()
    client.force_login(labeler.user)

    waiting = client.get(f"/assignments/{assignment.pk}/")
    assert b"being generated" in waiting.content
    assert b'hx-trigger="every 2s"' in waiting.content

    StepCandidateSet.objects.filter(assignment=assignment).update(
        status=CandidateSetStatus.READY, texts=["Alt A: $x = 7$.", STEPS[1], "Alt B: $x=5$."], sampling={"model": "m"}
    )
    page = client.get(f"/assignments/{assignment.pk}/")

    assert b"being generated" not in page.content
    assert b"Alt A" in page.content and b"Alt B" in page.content
    # Stored on the solution (a copy of the step itself is not an alternative).
    stored = list(StepAlternative.objects.values_list("step_index", "ordinal", "text", "source_model"))
    assert stored == [(1, 1, "Alt A: $x = 7$.", "m"), (1, 2, "Alt B: $x=5$.", "m")]
    with pytest.raises(NotFinished):
        assignment_submit(assignment_id=assignment.pk, user_id=None)  # alternatives must be rated first

    step_rate(
        assignment_id=assignment.pk, user_id=None, step_index=1, completion_index=1, rating=1, flagged=False, version=3
    )
    step_rate(
        assignment_id=assignment.pk, user_id=None, step_index=1, completion_index=2, rating=0, flagged=False, version=4
    )
    assert assignment_submit(assignment_id=assignment.pk, user_id=None) == FinishReason.FOUND_ERROR

    out = tmp_path / "out.jsonl"
    call_command("export_prm800k", "--output", str(out), "--no-progress")
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    error_step = record["label"]["steps"][1]
    assert [(c["text"], c["rating"]) for c in error_step["completions"]] == [
        (STEPS[1], -1),
        ("Alt A: $x = 7$.", 1),
        ("Alt B: $x=5$.", 0),
    ]
    assert error_step["chosen_completion"] is None
    assert StepRating.objects.filter(step__assignment=assignment).count() == 4


def test_a_failed_generation_does_not_block_the_task(generator_configured, django_capture_on_commit_callbacks):
    make_task(generation=make_generation())
    assignment = assignment_next(labeler=make_labeler())
    _rate_until_error(assignment, django_capture_on_commit_callbacks)
    StepCandidateSet.objects.filter(assignment=assignment).update(status=CandidateSetStatus.FAILED, error="503")

    assert assignment_submit(assignment_id=assignment.pk, user_id=None) == FinishReason.FOUND_ERROR


def test_nothing_is_asked_without_a_generator(django_capture_on_commit_callbacks):
    make_task(generation=make_generation())
    assignment = assignment_next(labeler=make_labeler())
    with django_capture_on_commit_callbacks(execute=False) as queued:
        step_rate(
            assignment_id=assignment.pk,
            user_id=None,
            step_index=0,
            completion_index=0,
            rating=-1,
            flagged=False,
            version=1,
        )

    assert queued == [] and not StepCandidateSet.objects.exists()
    assert assignment_submit(assignment_id=assignment.pk, user_id=None) == FinishReason.FOUND_ERROR
