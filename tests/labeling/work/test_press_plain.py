"""A key press in one statement (labeling.work.hotpath.PRESS_PLAIN): stored exactly as the rules in Python store it.

The statement writes only where press_plain_apply's conditions hold, and there
it must leave the database and answer the page exactly as presses_apply
would. The property test drives twin assignments (the same steps, the same
moments) with the same random presses, one through the statement where it
applies and presses_apply where it does not, the other through presses_apply
alone, and compares every stored column after every press.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from benchmarks.serving.roundtrips import counting_wait
from labeling.models import Assignment, AssignmentStatus, LabeledStep, StepRating
from labeling.work.queue import assignment_next
from labeling.work.rating import PlainPressed, Press, Pressed, press_plain_apply, presses_apply
from labeling.work.selectors import task_screen_from
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

postgresql_only = pytest.mark.postgres

STEPS = ["One.", "Two.", "Three.", "Four."]
IDLE = timedelta(seconds=settings.IDLE_GAP_SECONDS)


def _started(now: datetime, *, steps: list[str] = STEPS, **task_kwargs: Any) -> Assignment:
    task = make_task(generation=make_generation(), steps=steps, **task_kwargs)
    assignment = assignment_next(labeler=make_labeler(), now=now)
    assert assignment is not None and assignment.task_id == task.pk
    return assignment


def _plain(a: Assignment, press: Press, now: datetime) -> PlainPressed | None:
    user = a.labeler.user
    return press_plain_apply(assignment_id=a.pk, user_id=user.pk, password_hash=user.password, press=press, now=now)


def _state(a: Assignment) -> tuple[Any, ...]:
    """Everything a press may write, by value (ids left out: the twins' rows have their own)."""
    row = Assignment.objects.values_list(
        "status", "version", "ratings_reset_version", "total_time_ms", "started_at", "last_activity_at",
        "lease_expires_at",
    ).get(pk=a.pk)  # fmt: skip
    steps = list(
        LabeledStep.objects.filter(assignment=a).order_by("index").values_list("index", "chosen_completion",
                                                                                "human_completion")
    )  # fmt: skip
    ratings = list(
        StepRating.objects.filter(step__assignment=a)
        .order_by("step__index", "completion_index")
        .values_list("step__index", "completion_index", "text", "rating", "flagged", "version", "updated_at")
    )
    return row, steps, ratings


def _answer(outcome: PlainPressed | Pressed) -> tuple[Any, ...]:
    """What the key press's JSON answer is made of: applied, refusal, version, reshaped, keyboard, submit box."""
    if isinstance(outcome, PlainPressed):
        progress = outcome.progress
        return 1, None, outcome.version, False, progress.current_key, progress.ready_reason, progress.stop_index
    screen = task_screen_from(assignment=outcome.assignment, ratings=outcome.ratings)
    refusal = outcome.refusal.value if outcome.refusal else None
    return (outcome.applied, refusal, screen.version, outcome.reshaped, screen.current_key, screen.ready_reason,
            screen.progress.stop_index)  # fmt: skip


# --- the statement, case by case ----------------------------------------------


@postgresql_only
@pytest.mark.django_db
def test_a_plain_press_is_one_statement_in_one_round_trip(monkeypatch, django_assert_num_queries):
    from psycopg import waiting

    now = timezone.now()
    _plain(_started(now), Press(0, 0, 0, rating=1), now)  # prepared on this connection (a round trip, once)
    a = _started(now)
    trips: list[int] = []
    monkeypatch.setattr(waiting, "wait", counting_wait(waiting.wait, trips.append))
    with django_assert_num_queries(1):
        pressed = _plain(a, Press(0, 0, 0, rating=1), now + timedelta(seconds=2))
    monkeypatch.undo()
    assert sum(trips) == 1
    assert pressed is not None and pressed.version == 1
    assert (pressed.progress.current_key, pressed.progress.ready_reason) == ("c-1-0", None)
    row, steps, ratings = _state(a)
    assert row[1:4] == (1, 0, 2000)  # version, reset version, two seconds on task
    assert steps == [(0, None, None)]
    assert ratings == [(0, 0, "One.", 1, None, 1, now + timedelta(seconds=2))]


@postgresql_only
@pytest.mark.django_db
def test_the_next_step_moves_the_previous_ones_chosen_completion_and_the_last_step_readies_the_submit():
    now = timezone.now()
    a = _started(now)
    for step, rating in enumerate([1, 0, 1, 1]):
        pressed = _plain(a, Press(step, 0, step, rating=rating), now)
        assert pressed is not None, step
    assert pressed.progress.current_key == "finish" and pressed.progress.ready_reason == "solution"
    _row, steps, ratings = _state(a)
    assert steps == [(0, 0, None), (1, 0, None), (2, 0, None), (3, None, None)]
    assert [r[3] for r in ratings] == [1, 0, 1, 1]
    # A re-rating and a flag keep the trajectory; the flag keeps the rating.
    assert _plain(a, Press(1, 0, 4, rating=1), now) is not None
    assert _plain(a, Press(1, 0, 5, flag=True), now) is not None
    assert _plain(a, Press(1, 0, 6, rating=0), now) is not None
    _row, _steps, ratings = _state(a)
    assert ratings[1][3:6] == (0, True, 7)


@postgresql_only
@pytest.mark.django_db
def test_a_minus_one_on_the_next_step_stops_labeling_there_and_readies_a_found_error_submit():
    now = timezone.now()
    a = _started(now)
    assert _plain(a, Press(0, 0, 0, rating=1), now) is not None
    pressed = _plain(a, Press(1, 0, 1, rating=-1), now)
    assert pressed is not None
    assert (pressed.progress.stop_index, pressed.progress.stopped_at_error) == (1, True)
    assert (pressed.progress.current_key, pressed.progress.ready_reason) == ("finish", "found_error")
    row, steps, _ratings = _state(a)
    assert row[1:3] == (2, 2)  # a late press aimed before the -1 cannot bring a later step back
    assert steps == [(0, 0, None), (1, None, None)]
    # Past the -1 nothing is plain: changing it drops or reveals steps (Python's rules).
    assert _plain(a, Press(1, 0, 2, rating=1), now) is None
    assert _plain(a, Press(2, 0, 2, rating=1), now) is None


@postgresql_only
@pytest.mark.django_db
@pytest.mark.parametrize(
    "case",
    [
        "another labeler",
        "password changed",
        "deactivated",
        "stale version",
        "lease near expiry",
        "submitted",
        "alternatives stored",
        "step not reached",
        "flag on the next step",
        "alternative completion",
        "no such step",
        "phase one",
    ],
)
def test_it_writes_nothing_where_the_rules_in_python_decide(case):
    now = timezone.now()
    kwargs: dict[str, Any] = {"alternatives": {1: ["Other two."]}} if case == "alternatives stored" else {}
    a = _started(now, **kwargs)
    if case == "phase one":
        a.task.solution.steps = None
        a.task.solution.save()
    else:
        assert _plain(a, Press(0, 0, 0, rating=1), now) is not None
    user = a.labeler.user
    press = Press(1, 0, 1, rating=-1 if case == "alternatives stored" else 1)
    user_id, password = user.pk, user.password
    if case == "another labeler":
        other = make_labeler().user
        user_id, password = other.pk, other.password
    elif case == "password changed":
        user.set_password("another-password-2")
        user.save()
    elif case == "deactivated":
        user.is_active = False
        user.save()
    elif case == "stale version":
        press = Press(1, 0, 0, rating=1)
    elif case == "lease near expiry":
        Assignment.objects.filter(pk=a.pk).update(lease_expires_at=now + timedelta(seconds=30))
    elif case == "submitted":
        Assignment.objects.filter(pk=a.pk).update(status=AssignmentStatus.SUBMITTED, finish_reason="solution")
    elif case == "step not reached":
        press = Press(2, 0, 1, rating=1)
    elif case == "flag on the next step":
        press = Press(1, 0, 1, flag=True)
    elif case == "alternative completion":
        press = Press(0, 1, 1, rating=1)
    elif case == "no such step":
        press = Press(len(STEPS), 0, 1, rating=1)
    elif case == "phase one":
        press = Press(0, 0, 0, rating=1)
    before = _state(a)
    assert press_plain_apply(assignment_id=a.pk, user_id=user_id, password_hash=password, press=press, now=now) is None
    assert _state(a) == before


@postgresql_only
@pytest.mark.django_db
def test_a_minus_one_is_not_tried_where_the_step_generator_would_be_asked(settings):
    settings.STEPGEN_BACKEND = "openai"
    now = timezone.now()
    a = _started(now)
    assert _plain(a, Press(0, 0, 0, rating=-1), now) is None
    assert _plain(a, Press(0, 0, 0, rating=1), now) is not None


@pytest.mark.django_db
def test_on_sqlite_the_statement_does_not_run_and_the_press_goes_the_usual_way():
    if connection.vendor == "postgresql":
        pytest.skip("SQLite's behaviour")
    now = timezone.now()
    a = _started(now)
    assert _plain(a, Press(0, 0, 0, rating=1), now) is None
    assert _state(a)[2] == []


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_two_presses_aimed_at_the_same_state_from_two_connections_store_exactly_one():
    now = timezone.now()
    a = _started(now)
    assert _plain(a, Press(0, 0, 0, rating=1), now) is not None
    user = a.labeler.user
    start = threading.Barrier(2)
    results: list[PlainPressed | None] = []

    def press(rating: int) -> None:
        try:
            start.wait()
            results.append(
                press_plain_apply(assignment_id=a.pk, user_id=user.pk, password_hash=user.password,
                                  press=Press(1, 0, 1, rating=rating), now=now)
            )  # fmt: skip
        finally:
            connections.close_all()

    threads = [threading.Thread(target=press, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r is None for r in results) == [False, True]
    winner = next(r for r in results if r is not None)
    row, steps, ratings = _state(a)
    assert row[1] == winner.version == 2
    assert len(steps) == 2 and len(ratings) == 2


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_plain_press_and_a_press_through_the_rules_aimed_at_the_same_state_store_exactly_one():
    # Two tabs: one press goes through the statement, the other (a -1 on a
    # rated step, which drops the steps after it) through presses_apply.
    now = timezone.now()
    a = _started(now)
    for step in range(3):
        assert _plain(a, Press(step, 0, step, rating=1), now) is not None
    user = a.labeler.user
    start = threading.Barrier(2)
    applied: list[bool] = []

    def plain() -> None:
        try:
            start.wait()
            applied.append(_plain(a, Press(1, 0, 3, rating=0), now) is not None)
        finally:
            connections.close_all()

    def through_the_rules() -> None:
        try:
            start.wait()
            pressed = presses_apply(assignment_id=a.pk, user_id=user.pk, presses=[Press(0, 0, 3, rating=-1)], now=now)
            applied.append(pressed.applied == 1)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=plain), threading.Thread(target=through_the_rules)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(applied) == [False, True]
    row, steps, ratings = _state(a)
    assert row[1] == 4  # one press moved the state on, the other was refused
    if len(steps) == 1:  # the -1 won: the steps after step 0 are gone, step 1's press was not stored
        assert [r[3] for r in ratings] == [-1]
    else:  # the plain press won: the -1 aimed at the same state was refused
        assert [r[3] for r in ratings] == [1, 0, 1]


# --- the statement against the rules in Python, press by press ----------------

GAPS = [
    timedelta(0),
    timedelta(microseconds=1),
    timedelta(microseconds=999),
    timedelta(milliseconds=1),
    timedelta(microseconds=1500),
    timedelta(seconds=3, microseconds=250),
    IDLE,
    IDLE + timedelta(milliseconds=1),
    timedelta(hours=1),  # the lease ran out meanwhile (nobody took the task)
    -timedelta(milliseconds=5),  # another server's clock, a little behind
]

press_strategy = st.tuples(
    st.integers(min_value=0, max_value=len(STEPS)),  # the step (one past the last: no such step)
    st.sampled_from([0, 0, 0, 0, 0, 0, 1]),  # the completion
    st.sampled_from(["+1", "+1", "0", "0", "-1", "flag", "unflag"]),
    st.sampled_from([0, 0, 0, 0, 0, 0, -1, 1]),  # the version aimed at, against the stored one
    st.sampled_from(GAPS),
)


@postgresql_only
@pytest.mark.django_db
@hypothesis_settings(max_examples=60)
@given(presses=st.lists(press_strategy, min_size=1, max_size=14), alternatives=st.booleans())
def test_the_statement_stores_and_answers_exactly_what_the_rules_in_python_do(presses, alternatives):
    now = timezone.now().replace(microsecond=123456)
    kwargs: dict[str, Any] = {"alternatives": {2: ["Other three."]}} if alternatives else {}
    fast, reference = _started(now, **kwargs), _started(now, **kwargs)
    assert _state(fast) == _state(reference)
    for step, completion, kind, off, gap in presses:
        now += gap
        stored = Assignment.objects.get(pk=reference.pk).version
        rating = {"+1": 1, "0": 0, "-1": -1}.get(kind)
        flag = {"flag": True, "unflag": False}.get(kind)
        press = Press(step, completion, max(stored + off, 0), rating=rating, flag=flag)

        expected = presses_apply(assignment_id=reference.pk, user_id=reference.labeler.user_id, presses=[press],
                                 now=now)  # fmt: skip
        got: PlainPressed | Pressed | None = _plain(fast, press, now)
        if got is None:
            got = presses_apply(assignment_id=fast.pk, user_id=fast.labeler.user_id, presses=[press], now=now)
        assert _answer(got) == _answer(expected), press
        assert _state(fast) == _state(reference), press
