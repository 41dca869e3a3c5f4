"""labeling.work.rating: every click stored at once, idempotent, in order, and timed on the server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labeling.data.labels import label_steps_freeze
from labeling.models import Assignment, AssignmentStatus, FinishReason, LabeledStep, StepRating, TaskStatus
from labeling.work.assignment import (
    AssignmentClosed,
    AssignmentNotFound,
    NotFinished,
    RatingRejected,
    assignment_abandon,
)
from labeling.work.queue import assignment_next
from labeling.work.rating import assignment_submit, step_rate
from tests.labeling.workflow_factories import STEPS, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def t0():
    return timezone.now()


def _start(t0, **task_kwargs) -> Assignment:
    make_task(generation=make_generation(), **task_kwargs)
    assignment = assignment_next(labeler=make_labeler(), now=t0)
    assert assignment is not None
    return assignment


class Clicks:
    """Rates like the page does: one growing version per click, a second apart."""

    def __init__(self, assignment: Assignment, t0) -> None:
        self.assignment, self.version, self.now = assignment, 0, t0

    def __call__(self, step: int, rating: int | None, *, completion: int = 0, flagged: bool = False) -> bool:
        self.version += 1
        self.now += timedelta(seconds=1)
        return step_rate(
            assignment_id=self.assignment.pk,
            user_id=None,
            step_index=step,
            completion_index=completion,
            rating=rating,
            flagged=flagged,
            version=self.version,
            now=self.now,
        ).applied


def _layout(assignment: Assignment) -> list[tuple[int, int | None, list[tuple[int, int | None, bool | None]]]]:
    return [
        (s.index, s.chosen_completion, [(r.completion_index, r.rating, r.flagged) for r in s.ratings.all()])
        for s in LabeledStep.objects.filter(assignment=assignment).prefetch_related("ratings").order_by("index")
    ]


def test_it_stores_a_rating_with_the_step_text(t0):
    a = _start(t0)
    assert Clicks(a, t0)(0, 1) is True
    rating = StepRating.objects.get()
    assert (rating.step.index, rating.completion_index, rating.text, rating.rating, rating.version) == (
        0, 0, STEPS[0], 1, 1,
    )  # fmt: skip
    assert rating.flagged is None  # the release's value for an unflagged original step


def test_it_keeps_chosen_completion_zero_on_passed_steps_and_null_at_the_stop(t0):
    a = _start(t0)
    click = Clicks(a, t0)
    click(0, 1)
    click(1, 0)
    click(2, 1)
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, 0, [(0, 0, None)]), (2, None, [(0, 1, None)])]


def test_it_ignores_a_repeated_request(t0):
    a = _start(t0)
    assert step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=1, flagged=False, version=5, now=t0
    ).applied
    assert not step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=1, flagged=False, version=5, now=t0
    ).applied
    assert StepRating.objects.count() == 1
    assert LabeledStep.objects.count() == 1


def test_it_does_not_let_a_stale_version_overwrite_a_newer_rating(t0):
    a = _start(t0)
    step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=0, flagged=True, version=7, now=t0
    )
    applied = step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=1, flagged=False, version=6, now=t0
    ).applied
    assert applied is False
    assert StepRating.objects.values_list("rating", "flagged", "version").get() == (0, True, 7)


def test_it_refuses_a_step_that_is_not_reached_yet(t0):
    a = _start(t0)
    with pytest.raises(RatingRejected):
        Clicks(a, t0)(2, 1)
    assert not LabeledStep.objects.exists()


def test_it_refuses_an_unknown_step_or_rating(t0):
    a = _start(t0)
    with pytest.raises(RatingRejected):
        Clicks(a, t0)(len(STEPS), 1)
    with pytest.raises(RatingRejected):
        Clicks(a, t0)(0, 2)


def test_it_resumes_with_the_same_ratings_after_a_reload(t0):
    from labeling.work.selectors import task_screen

    a = _start(t0)
    click = Clicks(a, t0)
    click(0, 1)
    click(1, 0, flagged=True)
    screen = task_screen(assignment=Assignment.objects.get(pk=a.pk))
    assert [(r.own.rating, r.own.flagged) for r in screen.rows] == [(1, False), (0, True), (None, False)]
    assert screen.current_key == "c-2-0"
    assert screen.version == 2


def test_it_ends_the_trajectory_when_an_earlier_step_turns_negative(t0):
    a = _start(t0)
    click = Clicks(a, t0)
    for i in range(4):
        click(i, 1)
    click(1, -1)
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, None, [(0, -1, None)])]
    a.refresh_from_db()
    assert a.ratings_reset_version == click.version


def test_it_continues_when_the_negative_step_turns_non_negative(t0):
    a = _start(t0)
    click = Clicks(a, t0)
    click(0, 1)
    click(1, -1)
    click(1, 0)
    click(2, 1)
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, 0, [(0, 0, None)]), (2, None, [(0, 1, None)])]


def test_it_does_not_bring_back_a_rating_a_newer_click_deleted(t0):
    a = _start(t0)
    step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=1, flagged=False, version=1, now=t0
    )
    # version 3 (step 0 -> -1, which drops step 1) lands before version 2 (rate step 1).
    step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=-1, flagged=False, version=3, now=t0
    )
    step_rate(
        assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=1, flagged=False, version=4, now=t0
    )
    late = step_rate(
        assignment_id=a.pk, user_id=None, step_index=1, completion_index=0, rating=-1, flagged=False, version=2, now=t0
    ).applied
    assert late is False
    assert _layout(a) == [(0, None, [(0, 1, None)])]


def test_it_asks_for_the_alternatives_at_the_error_and_then_finishes_with_found_error(t0):
    a = _start(t0, alternatives={1: ["Alternative A $y$", "Alternative B"]})
    click = Clicks(a, t0)
    click(0, 1)
    click(1, -1)
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, None, [(0, -1, None), (1, None, False), (2, None, False)])]
    with pytest.raises(NotFinished):
        assignment_submit(assignment_id=a.pk, user_id=None)
    click(1, 0, completion=1)
    click(1, -1, completion=2, flagged=True)
    assert assignment_submit(assignment_id=a.pk, user_id=None, now=click.now) == FinishReason.FOUND_ERROR
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, None, [(0, -1, None), (1, 0, False), (2, -1, True)])]
    assert StepRating.objects.get(completion_index=1).text == "Alternative A $y$"


def test_it_drops_the_alternatives_when_the_error_step_is_rated_again_non_negative(t0):
    a = _start(t0, alternatives={1: ["Alternative A"]})
    click = Clicks(a, t0)
    click(0, 1)
    click(1, -1)
    click(1, 0, completion=1)
    click(1, 1)
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, None, [(0, 1, None)])]


def test_it_refuses_to_rate_alternatives_of_a_step_that_is_not_the_error(t0):
    a = _start(t0, alternatives={1: ["Alternative A"]})
    click = Clicks(a, t0)
    click(0, 1)
    with pytest.raises(RatingRejected):
        click(1, 0, completion=1)


def test_it_finishes_with_solution_after_the_last_step(t0):
    a = _start(t0)
    click = Clicks(a, t0)
    for i in range(len(STEPS) - 1):
        click(i, 1)
    with pytest.raises(NotFinished):
        assignment_submit(assignment_id=a.pk, user_id=None)
    click(len(STEPS) - 1, 0)
    assert assignment_submit(assignment_id=a.pk, user_id=None, now=click.now) == FinishReason.SOLUTION
    a.refresh_from_db()
    assert (a.status, a.finish_reason, a.submitted_at) == (AssignmentStatus.SUBMITTED, "solution", click.now)
    assert [s.chosen_completion for s in a.labeled_steps.order_by("index")] == [0, 0, 0, 0, None]
    a.task.refresh_from_db()
    assert a.task.status == TaskStatus.DONE


def test_it_makes_a_submitted_assignment_read_only(t0):
    a = _start(t0)
    click = Clicks(a, t0)
    click(0, -1)
    assignment_submit(assignment_id=a.pk, user_id=None)
    with pytest.raises(AssignmentClosed):
        click(0, 1)
    with pytest.raises(AssignmentClosed):
        assignment_abandon(assignment=a, finish_reason=FinishReason.GIVE_UP, reason_text="again")
    assert StepRating.objects.get().rating == -1


def test_it_needs_a_reason_to_give_up_or_report_a_bad_problem(t0):
    a = _start(t0)
    for reason in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
        with pytest.raises(RatingRejected):
            assignment_abandon(assignment=a, finish_reason=reason, reason_text="   ")
    a.refresh_from_db()
    assert a.status == AssignmentStatus.IN_PROGRESS


def test_it_gives_up_with_the_reason_and_keeps_the_ratings(t0):
    a = _start(t0)
    click = Clicks(a, t0)
    click(0, 1)
    click(1, None, flagged=True)  # flagged before rating
    assignment_abandon(assignment=a, finish_reason=FinishReason.GIVE_UP, reason_text=" too long ", now=click.now)
    a.refresh_from_db()
    assert (a.finish_reason, a.finish_reason_text) == ("give_up", "too long")
    assert _layout(a) == [(0, 0, [(0, 1, None)]), (1, None, [(0, None, True)])]


def test_it_reports_a_bad_problem(t0):
    a = _start(t0)
    assignment_abandon(assignment=a, finish_reason=FinishReason.BAD_PROBLEM, reason_text="answer is wrong")
    a.refresh_from_db()
    assert (a.status, a.finish_reason) == (AssignmentStatus.SUBMITTED, "bad_problem")


def test_it_counts_time_between_events_but_not_idle_gaps(t0, settings):
    settings.IDLE_GAP_SECONDS = 60
    a = _start(t0)

    def rate(step: int, at: timedelta, version: int) -> None:
        step_rate(
            assignment_id=a.pk, user_id=None, step_index=step, completion_index=0, rating=1, flagged=False,
            version=version, now=t0 + at,
        )  # fmt: skip

    rate(0, timedelta(seconds=20), 1)  # +20 s from the hand-out
    rate(1, timedelta(seconds=50), 2)  # +30 s
    rate(2, timedelta(minutes=30), 3)  # away for half an hour: not counted
    rate(3, timedelta(minutes=30, seconds=5), 4)  # +5 s
    assignment_abandon(
        assignment=a, finish_reason=FinishReason.GIVE_UP, reason_text="x", now=t0 + timedelta(minutes=30, seconds=65)
    )  # exactly the idle limit: counted
    a.refresh_from_db()
    assert a.total_time_ms == (20 + 30 + 5 + 60) * 1000
    assert a.last_activity_at == a.submitted_at == t0 + timedelta(minutes=30, seconds=65)


def test_it_renews_the_lease_on_every_rating(t0, settings):
    a = _start(t0)
    later = t0 + timedelta(seconds=100)
    step_rate(
        assignment_id=a.pk,
        user_id=None,
        step_index=0,
        completion_index=0,
        rating=1,
        flagged=False,
        version=1,
        now=later,
    )
    a.refresh_from_db()
    assert a.lease_expires_at == later + timedelta(seconds=settings.LEASE_SECONDS)


def test_it_stores_one_rating_in_a_bounded_number_of_queries(t0, django_assert_max_num_queries):
    a = _start(t0)
    click = Clicks(a, t0)
    click(0, 1)
    with django_assert_max_num_queries(10):
        click(1, 1)
    with django_assert_max_num_queries(9):
        click(1, 0)


def test_the_label_frozen_at_submit_is_exactly_the_one_rebuilt_from_the_rows(t0):
    a = _start(t0, alternatives={2: ["Alternative A", "Alternative B"]})
    click = Clicks(a, t0)
    click(0, 1, flagged=True)
    click(1, 0)
    click(2, -1)
    click(2, 1, completion=1)
    click(2, 0, completion=2, flagged=True)
    assignment_submit(assignment_id=a.pk, user_id=None, now=click.now)
    a.refresh_from_db()
    # Byte for byte: the export writes the frozen copy as it is.
    assert a.label_steps_json == label_steps_freeze(assignment_id=a.pk)
    assert '"chosen_completion":null' in a.label_steps_json


def test_another_labelers_assignment_is_not_found_and_nothing_changes(t0):
    a = _start(t0)
    other = make_labeler()
    with pytest.raises(AssignmentNotFound):
        step_rate(
            assignment_id=a.pk, user_id=other.user_id, step_index=0, completion_index=0, rating=1, flagged=False,
            version=1, now=t0,
        )  # fmt: skip
    with pytest.raises(AssignmentNotFound):
        assignment_submit(assignment_id=a.pk, user_id=other.user_id, now=t0)
    assert not StepRating.objects.exists()
    a.refresh_from_db()
    assert (a.status, a.total_time_ms, a.lease_expires_at) == (AssignmentStatus.IN_PROGRESS, 0, a.lease_expires_at)
    # The owner's own id works.
    outcome = step_rate(
        assignment_id=a.pk, user_id=a.labeler.user_id, step_index=0, completion_index=0, rating=1, flagged=False,
        version=1, now=t0,
    )  # fmt: skip
    assert outcome.applied


def test_a_rating_just_before_the_lease_runs_out_counts_and_renews_it(t0, settings):
    a = _start(t0)
    assert a.lease_expires_at is not None
    almost = a.lease_expires_at - timedelta(seconds=1)
    assert step_rate(
        assignment_id=a.pk,
        user_id=None,
        step_index=0,
        completion_index=0,
        rating=1,
        flagged=False,
        version=1,
        now=almost,
    ).applied
    a.refresh_from_db()
    assert a.lease_expires_at == almost + timedelta(seconds=settings.LEASE_SECONDS)


def test_a_lease_handed_to_someone_else_takes_no_more_ratings(t0, settings):
    a = _start(t0)
    Clicks(a, t0)(0, 1)
    later = t0 + timedelta(seconds=settings.LEASE_SECONDS + 5)
    # The task is open again, so the next labeler gets it and a is expired.
    assert assignment_next(labeler=make_labeler(), now=later).task_id == a.task_id
    with pytest.raises(AssignmentClosed, match="went to another labeler"):
        step_rate(
            assignment_id=a.pk,
            user_id=None,
            step_index=1,
            completion_index=0,
            rating=1,
            flagged=False,
            version=2,
            now=later,
        )
    assert StepRating.objects.count() == 1
