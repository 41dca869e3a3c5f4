"""labeling.work.queue: which task comes next, leases, expiry and re-queueing."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from labeling.models import Assignment, AssignmentStatus, GenerationStatus, LabelerStatus, Task, TaskKind, TaskStatus
from labeling.work.queue import LabelerMayNotWork, assignment_next
from labeling.work.rating import step_rate
from tests.labeling.workflow_factories import make_assignment, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def test_it_hands_out_the_highest_priority_task_first():
    g = make_generation()
    make_task(generation=g, priority=0.2)
    best = make_task(generation=g, priority=0.9)
    make_task(generation=g, priority=0.5)
    assignment = assignment_next(labeler=make_labeler())
    assert assignment is not None
    assert assignment.task == best


def test_it_breaks_priority_ties_by_id():
    g = make_generation()
    first = make_task(generation=g, priority=0.5)
    make_task(generation=g, priority=0.5)
    assert assignment_next(labeler=make_labeler()).task == first


def test_it_picks_the_best_task_across_open_generations():
    make_task(generation=make_generation(), priority=0.3)
    best = make_task(generation=make_generation(), priority=0.7)
    assert assignment_next(labeler=make_labeler()).task == best


def test_it_leases_the_task_with_server_timestamps(settings):
    make_task(generation=make_generation())
    now = timezone.now()
    assignment = assignment_next(labeler=make_labeler(), now=now)
    assert assignment.status == AssignmentStatus.IN_PROGRESS
    assert assignment.started_at == now
    assert assignment.last_activity_at == now
    assert assignment.lease_expires_at == now + timedelta(seconds=settings.LEASE_SECONDS)
    assert assignment.total_time_ms == 0


def test_it_returns_the_same_task_while_the_lease_is_live():
    g = make_generation()
    make_task(generation=g)
    make_task(generation=g)
    labeler = make_labeler()
    first = assignment_next(labeler=labeler)
    again = assignment_next(labeler=labeler)
    assert again.pk == first.pk
    assert Assignment.objects.count() == 1


def test_it_skips_closed_generations_and_screening_items():
    make_task(generation=make_generation(status=GenerationStatus.CLOSED), priority=5)
    screening = make_task(generation=make_generation(), priority=4)
    Task.objects.filter(pk=screening.pk).update(kind=TaskKind.SCREENING)
    normal = make_task(generation=make_generation(), priority=1)
    assert assignment_next(labeler=make_labeler()).task == normal


def test_it_skips_done_tasks_and_tasks_the_labeler_already_did():
    g = make_generation()
    done = make_task(generation=g, priority=3)
    Task.objects.filter(pk=done.pk).update(status=TaskStatus.DONE)
    had = make_task(generation=g, priority=2, labelers_needed=3)
    fresh = make_task(generation=g, priority=1)
    labeler = make_labeler()
    make_assignment(had, labeler=labeler, status=AssignmentStatus.SUBMITTED, finish_reason="give_up")
    assert assignment_next(labeler=labeler).task == fresh


def test_it_honours_labelers_needed():
    g = make_generation()
    shared = make_task(generation=g, priority=2, labelers_needed=2)
    other = make_task(generation=g, priority=1)
    a, b, c = make_labeler(), make_labeler(), make_labeler()
    assert assignment_next(labeler=a).task == shared
    assert assignment_next(labeler=b).task == shared
    assert assignment_next(labeler=c).task == other


def test_it_returns_none_when_nothing_is_left():
    make_task(generation=make_generation())
    assert assignment_next(labeler=make_labeler()) is not None
    assert assignment_next(labeler=make_labeler()) is None


def test_it_refuses_labelers_who_may_not_work():
    make_task(generation=make_generation())
    for status in (LabelerStatus.SUSPENDED, LabelerStatus.FAILED_SCREENING):
        with pytest.raises(LabelerMayNotWork):
            assignment_next(labeler=make_labeler(status=status))
    assert not Assignment.objects.exists()


def test_it_gives_unscreened_labelers_no_normal_work():
    # The screening gate (tests/labeling/quality/test_screening.py): without a
    # screening set they wait; they never get normal work.
    make_task(generation=make_generation())
    assert assignment_next(labeler=make_labeler(status=LabelerStatus.SCREENING)) is None


def test_it_requeues_an_expired_lease_and_marks_the_old_assignment_expired(settings):
    task = make_task(generation=make_generation())
    slow, quick = make_labeler(), make_labeler()
    start = timezone.now()
    lost = assignment_next(labeler=slow, now=start)
    step_rate(
        assignment_id=lost.pk,
        user_id=None,
        step_index=0,
        completion_index=0,
        rating=1,
        flagged=False,
        version=1,
        now=start,
    )
    later = start + timedelta(seconds=settings.LEASE_SECONDS + 1)

    taken = assignment_next(labeler=quick, now=later)

    assert taken.task == task
    lost.refresh_from_db()
    assert lost.status == AssignmentStatus.EXPIRED
    # Kept for audit; exports read submitted assignments only.
    assert lost.labeled_steps.count() == 1
    # The one who lost the lease does not get it back, and nothing else is left.
    assert assignment_next(labeler=slow, now=later) is None


def test_it_resumes_an_expired_lease_that_nobody_took(settings):
    make_task(generation=make_generation())
    labeler = make_labeler()
    start = timezone.now()
    first = assignment_next(labeler=labeler, now=start)
    later = start + timedelta(seconds=settings.LEASE_SECONDS * 2)
    again = assignment_next(labeler=labeler, now=later)
    assert again.pk == first.pk
    assert again.status == AssignmentStatus.IN_PROGRESS
    assert again.lease_expires_at == later + timedelta(seconds=settings.LEASE_SECONDS)


def test_it_does_not_count_a_lapsed_lease_as_taking_a_place(settings):
    task = make_task(generation=make_generation(), labelers_needed=1)
    start = timezone.now()
    assignment_next(labeler=make_labeler(), now=start)
    assert assignment_next(labeler=make_labeler(), now=start + timedelta(seconds=1)) is None
    later = start + timedelta(seconds=settings.LEASE_SECONDS + 1)
    assert assignment_next(labeler=make_labeler(), now=later).task == task


def test_it_finds_the_next_task_in_a_bounded_number_of_queries(django_assert_max_num_queries):
    g = make_generation()
    for i in range(30):
        make_task(generation=g, priority=i)
    labeler = make_labeler()
    # The savepoint and its release around: the labeler's row lock with their
    # current lease (one statement), the rolling-quality window, open
    # generations, the candidate, its places with its solution and problem,
    # the lease; and when the QC coin comes up, the unseen QC items. (Before: 10.)
    with django_assert_max_num_queries(9):
        assert assignment_next(labeler=labeler) is not None
    # Resuming: the lock with the lease, and its renewal. (Before: 5.)
    with django_assert_max_num_queries(4):
        assert assignment_next(labeler=labeler) is not None  # the same lease


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_never_over_assigns_when_many_labelers_ask_at_once():
    g = make_generation()
    tasks = [make_task(generation=g, priority=i % 7) for i in range(30)]
    shared = make_task(generation=g, priority=100, labelers_needed=3)
    labelers = [make_labeler() for _ in range(48)]
    barrier = threading.Barrier(len(labelers))
    errors: list[BaseException] = []

    def ask(labeler):
        try:
            barrier.wait()
            assignment_next(labeler=labeler)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ask, args=(lab,)) for lab in labelers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert connection.vendor == "postgresql"
    per_task: dict[int, int] = {}
    for task_id in Assignment.objects.values_list("task_id", flat=True):
        per_task[task_id] = per_task.get(task_id, 0) + 1
    assert per_task.pop(shared.pk) == 3
    assert all(n == 1 for n in per_task.values())
    # 48 labelers, 33 places: every place is filled, nobody holds two leases.
    assert len(per_task) == len(tasks)
    assert Assignment.objects.values("labeler").distinct().count() == 33
