"""labeling.work.rating.assignment_submit_and_next: the submit and the next hand-out in one transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labeling.models import Assignment, AssignmentStatus, FinishReason, Generation, Labeler, LabelerStatus, TaskStatus
from labeling.work.assignment import AssignmentClosed, AssignmentNotFound, NotFinished
from labeling.work.queue import assignment_next, is_fresh_lease
from labeling.work.rating import assignment_submit_and_next, step_rate
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _started(now: datetime) -> tuple[Generation, Labeler, Assignment]:
    generation = make_generation()
    make_task(generation=generation)
    labeler = make_labeler()
    assignment = assignment_next(labeler=labeler, now=now)
    assert assignment is not None
    return generation, labeler, assignment


def _rate_error_at_first_step(assignment: Assignment, now: datetime) -> None:
    step_rate(
        assignment_id=assignment.pk, user_id=None, step_index=0, completion_index=0, rating=-1, flagged=False,
        version=1, now=now,
    )  # fmt: skip


def test_it_submits_and_leases_the_next_task_in_one_transaction():
    t0 = timezone.now()
    generation, labeler, first = _started(t0)
    second_task = make_task(generation=generation)
    _rate_error_at_first_step(first, t0 + timedelta(seconds=5))
    with CaptureQueriesContext(connection) as queries:
        handout = assignment_submit_and_next(
            assignment_id=first.pk, user_id=labeler.user_id, labeler=labeler, now=t0 + timedelta(seconds=9)
        )
    # Inside the test's transaction a transaction is a savepoint: exactly one.
    savepoints = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 1
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED
    assert first.finish_reason == handout.reason == FinishReason.FOUND_ERROR
    assert first.total_time_ms == 9000  # the idle-gap accounting holds across the combined call
    assert first.task.status == TaskStatus.DONE
    assert handout.following is not None and handout.following.task_id == second_task.pk
    assert handout.fresh
    assert Assignment.objects.get(labeler=labeler, status=AssignmentStatus.IN_PROGRESS).pk == handout.following.pk


def test_a_refused_submit_hands_out_nothing():
    t0 = timezone.now()
    generation, labeler, first = _started(t0)
    make_task(generation=generation)
    with pytest.raises(NotFinished):
        assignment_submit_and_next(assignment_id=first.pk, user_id=labeler.user_id, labeler=labeler, now=t0)
    assert list(Assignment.objects.filter(labeler=labeler).values_list("pk", "status")) == [
        (first.pk, AssignmentStatus.IN_PROGRESS)
    ]


def test_a_second_submit_of_the_same_assignment_is_refused_and_hands_out_nothing_more():
    t0 = timezone.now()
    generation, labeler, first = _started(t0)
    make_task(generation=generation)
    make_task(generation=generation)
    _rate_error_at_first_step(first, t0)
    handout = assignment_submit_and_next(assignment_id=first.pk, user_id=labeler.user_id, labeler=labeler, now=t0)
    with pytest.raises(AssignmentClosed):
        assignment_submit_and_next(assignment_id=first.pk, user_id=labeler.user_id, labeler=labeler, now=t0)
    assert Assignment.objects.filter(labeler=labeler).count() == 2
    assert handout.following is not None


def test_a_labeler_who_may_no_longer_work_gets_the_submit_and_no_next_task():
    t0 = timezone.now()
    generation, labeler, first = _started(t0)
    make_task(generation=generation)
    _rate_error_at_first_step(first, t0)
    # An admin suspends them while they work: the submit stands, nothing new is handed out.
    type(labeler).objects.filter(pk=labeler.pk).update(status=LabelerStatus.SUSPENDED)
    handout = assignment_submit_and_next(assignment_id=first.pk, user_id=labeler.user_id, labeler=labeler, now=t0)
    assert handout.following is None
    assert labeler.status == LabelerStatus.SUSPENDED
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED


def test_a_resumed_lease_is_not_taken_for_a_fresh_one():
    t0 = timezone.now()
    _generation, labeler, first = _started(t0)
    again = assignment_next(labeler=labeler, now=t0 + timedelta(seconds=1))
    assert again is not None and again.pk == first.pk
    assert not is_fresh_lease(again, now=t0 + timedelta(seconds=1))


def test_a_caller_that_loaded_no_labeler_gets_the_same_hand_out_with_the_user_checked_in_the_lock():
    # What a session verified once per process sends (annotate.auth.SessionUser):
    # the user's id and password hash, no Labeler.
    t0 = timezone.now()
    generation, labeler, first = _started(t0)
    second_task = make_task(generation=generation)
    _rate_error_at_first_step(first, t0 + timedelta(seconds=5))
    user = labeler.user
    before = Assignment.objects.values_list("status", "version").get(pk=first.pk)
    for wrong in ("pbkdf2_sha256$1$not$theirs", None):
        with pytest.raises((AssignmentNotFound, ValueError)):
            assignment_submit_and_next(assignment_id=first.pk, user_id=user.pk, labeler=None, password_hash=wrong,
                                       now=t0 + timedelta(seconds=9))  # fmt: skip
    assert Assignment.objects.values_list("status", "version").get(pk=first.pk) == before
    handout = assignment_submit_and_next(
        assignment_id=first.pk,
        user_id=user.pk,
        labeler=None,
        password_hash=user.password,
        now=t0 + timedelta(seconds=9),
    )
    assert handout.reason == FinishReason.FOUND_ERROR
    assert handout.labeler.pk == labeler.pk and handout.labeler.status == LabelerStatus.ACTIVE
    assert handout.following is not None and handout.following.task_id == second_task.pk
    # The labeler read by the locking read is their whole row, every field as the ORM reads it.
    stored = Labeler.objects.get(pk=labeler.pk)
    for field in Labeler._meta.concrete_fields:
        assert getattr(handout.labeler, field.attname) == getattr(stored, field.attname), field.name
    assert not handout.labeler.get_deferred_fields()


def test_a_task_for_two_labelers_closes_at_the_second_submission_and_not_before():
    t0 = timezone.now()
    generation = make_generation()
    shared = make_task(generation=generation, labelers_needed=2)
    make_task(generation=generation, priority=-1)  # what each is handed next
    make_task(generation=generation, priority=-2)
    submitted = []
    for n, labeler in enumerate((make_labeler(), make_labeler())):
        a = assignment_next(labeler=labeler, now=t0)
        assert a is not None and a.task_id == shared.pk
        _rate_error_at_first_step(a, t0 + timedelta(seconds=1))
        user = labeler.user
        assignment_submit_and_next(assignment_id=a.pk, user_id=user.pk, labeler=None, password_hash=user.password,
                                   now=t0 + timedelta(seconds=2))  # fmt: skip
        submitted.append(a.pk)
        shared.refresh_from_db()
        assert shared.status == (TaskStatus.DONE if n == 1 else TaskStatus.OPEN)
    assert set(Assignment.objects.filter(task=shared).values_list("pk", "status")) == {
        (pk, AssignmentStatus.SUBMITTED) for pk in submitted
    }


def test_a_deactivated_user_without_a_loaded_labeler_submits_nothing():
    t0 = timezone.now()
    _generation, labeler, first = _started(t0)
    _rate_error_at_first_step(first, t0 + timedelta(seconds=5))
    user = labeler.user
    user.is_active = False
    user.save()
    with pytest.raises(AssignmentNotFound):
        assignment_submit_and_next(assignment_id=first.pk, user_id=user.pk, labeler=None, password_hash=user.password)
    first.refresh_from_db()
    assert first.status == AssignmentStatus.IN_PROGRESS
