"""Pipelined writes (labeling.work.hotpath.pipelined): fewer round trips, the same stored state, errors not lost.

On PostgreSQL the statements of a pipelined block are sent without waiting for
each answer; these tests pin what that must never change: the ORM's row
counts, an error raised inside the caller's transaction (which then rolls
back), and a batch of key presses stored exactly as without the pipeline, in
four round trips (BEGIN, the locking read with the ratings, the writes, the
COMMIT).
On SQLite ``pipelined()`` does nothing, and the rating tests run there too.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from psycopg import waiting

from benchmarks.serving.roundtrips import counting_wait
from labeling.models import Assignment, FinishReason, LabeledStep, StepRating
from labeling.work.hotpath import labeled_step_add, pipelined
from labeling.work.queue import assignment_next
from labeling.work.rating import Press, assignment_submit_and_next, presses_apply
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="pipeline mode is PostgreSQL's")


class RoundTrips:
    """Counts psycopg's round trips to PostgreSQL, as the benchmark's probe does (benchmarks.serving.roundtrips)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0

        def add(trips: int) -> None:
            self.count += trips

        monkeypatch.setattr(waiting, "wait", counting_wait(waiting.wait, add))


def _started() -> Assignment:
    make_task(generation=make_generation())
    assignment = assignment_next(labeler=make_labeler(), now=timezone.now())
    assert assignment is not None
    return assignment


def _stored(assignment: Assignment) -> list[tuple[int, int | None, int, int | None, bool | None]]:
    return [
        (r.step.index, r.step.chosen_completion, r.completion_index, r.rating, r.flagged)
        for r in StepRating.objects.filter(step__assignment=assignment).select_related("step").order_by("step__index")
    ]


@postgresql_only
@pytest.mark.django_db(transaction=True)  # the service's own transaction, not a savepoint in the test's
def test_a_batch_of_key_presses_costs_four_round_trips_and_stores_each_press(monkeypatch):
    a = _started()
    connection.ensure_connection()
    trips = RoundTrips(monkeypatch)
    presses = [Press(0, 0, 0, rating=1), Press(1, 0, 1, rating=0), Press(2, 0, 2, rating=1), Press(2, 0, 3, flag=True)]
    pressed = presses_apply(assignment_id=a.pk, user_id=a.labeler.user_id, presses=presses,
                            now=timezone.now() + timedelta(seconds=1))  # fmt: skip
    # BEGIN (psycopg syncs a pipeline after it); the locking read with the
    # ratings; the three new steps, four upserts, two chosen_completion moves
    # and the assignment's UPDATE; COMMIT. Without the pipeline: 14.
    assert trips.count == 4
    assert (pressed.applied, pressed.refusal) == (4, None)
    monkeypatch.undo()
    assert _stored(a) == [(0, 0, 0, 1, None), (1, 0, 0, 0, None), (2, None, 0, 1, True)]
    a.refresh_from_db()
    assert a.version == 4


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_the_round_trip_count_is_one_per_statement_without_a_pipeline(monkeypatch):
    # What the count means, on a transaction everyone can count by hand.
    connection.ensure_connection()
    trips = RoundTrips(monkeypatch)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.execute("SELECT 2")
    assert trips.count == 4  # BEGIN, two statements, COMMIT


@postgresql_only
@pytest.mark.django_db
def test_the_orm_counts_rows_inside_a_pipeline():
    a = _started()
    for index in range(3):
        LabeledStep.objects.create(assignment=a, index=index)
    with transaction.atomic(), pipelined():
        # Both would say -1 if the count were read before the answer came.
        assert LabeledStep.objects.filter(assignment=a).update(chosen_completion=0) == 3
        assert LabeledStep.objects.filter(assignment=a, index__gt=0).delete()[0] == 2
    assert list(LabeledStep.objects.values_list("index", "chosen_completion")) == [(0, 0)]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_an_error_of_a_pipelined_statement_is_raised_as_djangos_and_rolls_the_transaction_back():
    a = _started()
    with pytest.raises(IntegrityError), transaction.atomic(), pipelined():
        labeled_step_add(assignment_id=a.pk, index=0)
        labeled_step_add(assignment_id=a.pk, index=0)  # labeled_step_unique_index: refused, but only at the sync
    assert not LabeledStep.objects.exists()
    # The connection is usable afterwards, out of pipeline mode.
    assert LabeledStep.objects.count() == 0
    assert connection.connection.pgconn.pipeline_status == 0


@pytest.mark.django_db
def test_a_press_on_a_step_added_in_the_same_batch_rates_that_step():
    # The new step's id is never read (the upsert names it by assignment and
    # index): a second press on it in the same batch must find it.
    a = _started()
    presses = [Press(0, 0, 0, rating=-1), Press(0, 0, 1, flag=True), Press(0, 0, 2, rating=1), Press(1, 0, 3, rating=0)]
    pressed = presses_apply(assignment_id=a.pk, user_id=None, presses=presses,
                            now=timezone.now() + timedelta(seconds=1))  # fmt: skip
    assert (pressed.applied, pressed.refusal) == (4, None)
    assert _stored(a) == [(0, 0, 0, 1, True), (1, None, 0, 0, None)]
    assert LabeledStep.objects.filter(assignment=a).count() == 2


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_submit_and_the_next_hand_out_ride_the_hand_outs_reads(monkeypatch):
    a = _started()
    following_task = make_task(generation=a.task.generation)
    now = timezone.now() + timedelta(seconds=1)
    presses_apply(assignment_id=a.pk, user_id=None, presses=[Press(0, 0, 0, rating=-1)], now=now)
    monkeypatch.setattr("labeling.work.queue._RNG", random.Random(1))  # a fixed QC draw
    connection.ensure_connection()
    trips = RoundTrips(monkeypatch)
    statements = CaptureQueriesContext(connection)
    with statements:
        handout = assignment_submit_and_next(assignment_id=a.pk, user_id=a.labeler.user_id, labeler=a.labeler,
                                             version=1, now=now)  # fmt: skip
    monkeypatch.undo()
    assert handout.reason == FinishReason.FOUND_ERROR
    assert handout.following is not None and handout.following.task_id == following_task.pk
    # BEGIN; both locks with the ratings; the submit's write (its row with
    # the frozen label and the task closed, one statement) with the labeler's
    # lock, the QC window and the open generations; the candidate; its
    # places; the new lease; the pipeline's closing sync; COMMIT. Each read
    # needs the answer before it, so these are the exchanges left. Without
    # the pipeline: 12.
    sent = [q["sql"] for q in statements.captured_queries]
    assert (sent[0], sent[-1], len(sent)) == ("BEGIN", "COMMIT", 12)
    finish = next(i for i, sql in enumerate(sent) if "WITH finished AS" in sql)
    assert "UPDATE labeling_task" in sent[finish] and "FOR NO KEY UPDATE OF l" in sent[finish + 1]
    lock = next(i for i, sql in enumerate(sent) if "FOR NO KEY UPDATE OF l" in sql)
    assert "a.task_kind = " in sent[lock + 1] and "LIMIT" in sent[lock + 1]  # the QC window, behind the lock
    assert "FROM labeling_generation" in sent[lock + 2]
    assert trips.count == 8


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_submit_that_loaded_no_labeler_reads_it_with_the_locks_in_their_round_trip(monkeypatch):
    a = _started()
    make_task(generation=a.task.generation)
    now = timezone.now() + timedelta(seconds=1)
    presses_apply(assignment_id=a.pk, user_id=None, presses=[Press(0, 0, 0, rating=-1)], now=now)
    monkeypatch.setattr("labeling.work.queue._RNG", random.Random(1))
    user = a.labeler.user
    connection.ensure_connection()
    trips = RoundTrips(monkeypatch)
    statements = CaptureQueriesContext(connection)
    with statements:
        handout = assignment_submit_and_next(assignment_id=a.pk, user_id=user.pk, labeler=None,
                                             password_hash=user.password, version=1, now=now)  # fmt: skip
    monkeypatch.undo()
    assert handout.following is not None
    sent = [q["sql"] for q in statements.captured_queries]
    # The labeler row is read by the assignment's locking read: no statement
    # and no round trip more than with a loaded labeler (12 and 8, as above).
    assert not any("WHERE user_id" in sql for sql in sent) and len(sent) == 12
    assert "JOIN labeling_labeler l ON l.id = a.labeler_id" in sent[2] and "FOR UPDATE OF a" in sent[2]
    assert trips.count == 8
    assert handout.labeler.pk == a.labeler.pk and handout.labeler.uuid == a.labeler.uuid
