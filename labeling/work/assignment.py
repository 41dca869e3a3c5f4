"""An assignment from hand-out to finish: the lock, time on task, finishing and giving up.

Phase 2 (labeling.work.rating) and phase 1 (labeling.work.phase_one) share all
of it: one assignment row lock serialises every write to an assignment, time on
task is measured on the server, and a finish freezes the label.

Time on task: each event (rating, finish) adds the gap since the previous event
to ``total_time_ms``, except that a gap longer than ``settings.IDLE_GAP_SECONDS``
counts as 0 (the labeler was away).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from labeling.data.labels import label_steps_freeze
from labeling.models import Assignment, AssignmentStatus, FinishReason
from labeling.work.hotpath import (
    RatingRow,
    assignment_finish_write,
    assignment_locked,
    assignment_locked_with_ratings,
)

MAX_VERSION = 2_000_000_000  # StepRating.version is a PositiveIntegerField.


class AssignmentNotFound(Exception):
    """No such assignment, or it is someone else's: the caller answers as for a missing one."""


class AssignmentClosed(Exception):
    """The assignment was submitted or its lease went to someone else: it is read-only."""


class RatingRejected(Exception):
    """The request does not fit the state of the assignment (e.g. a step that is not reached yet)."""


class NotFinished(Exception):
    """Submit was asked for while steps or alternatives are still unrated."""


def is_phase_one(assignment: Assignment) -> bool:
    """Whether the labeler builds the solution step by step (phase 1) rather than rating given steps (phase 2).

    Phase-1 tasks point at their problem's placeholder solution, which has no
    steps (their generation's ``phase`` says the same); the steps are what the
    screens and services go by, and the locking read loads them anyway.
    """
    return assignment.task.solution.steps is None


def assignment_for_labeler(*, user: AbstractBaseUser, pk: int) -> Assignment:
    """Assignment ``pk`` of the labeler signed in as ``user``, with its task, solution and problem.

    The one ownership check of the pages and the API: another labeler's
    assignment is AssignmentNotFound, exactly like a missing one. A write that
    starts from a request checks the owner inside its locking read instead
    (``assignment_lock_row``), where it costs no query of its own.
    """
    if user.pk is None:
        # Labelers imported from the release have no user: a user without an
        # id (not signed in) must not match them.
        raise AssignmentNotFound(pk)
    assignment = (
        Assignment.objects.select_related("task__solution__problem").filter(pk=pk, labeler__user_id=user.pk).first()
    )
    if assignment is None:
        raise AssignmentNotFound(pk)
    return assignment


def assignment_lock(assignment: Assignment) -> Assignment:
    """The assignment, locked for writing, with its task and the solution's steps; AssignmentClosed if read-only."""
    return assignment_lock_row(assignment_id=assignment.pk, user_id=None, now=timezone.now(), task_lock=True)


class LeaseNearExpiry(Exception):
    """The fast rating lock found a lease close to running out: take the task lock as well."""


def lease_margin() -> timedelta:
    # A lease this far from running out cannot be handed over by a request
    # that is in flight now (hand-over counts it as live), even with the
    # clocks of two app servers some seconds apart.
    return timedelta(seconds=min(60.0, settings.LEASE_SECONDS / 4))


def assignment_lock_row(*, assignment_id: int, user_id: int | None, now: datetime, task_lock: bool) -> Assignment:
    """The assignment row locked for writing, read with its task and steps in one query.

    ``user_id``: only that labeler's assignment is found (AssignmentNotFound
    otherwise), so the ownership check costs no query of its own.

    Every write to one assignment is serialised by its row lock, which is what
    makes the version checks of the rating service race-free. ``task_lock``:
    lock the task row first, the order labeling.work.queue uses, so that a
    hand-over of this task to someone else (which may mark this assignment
    EXPIRED) and this write wait for each other instead of deadlocking or
    racing; finishing needs it too (it counts the task's submissions). A
    rating may go without: while the lease is comfortably alive no hand-over
    can take the task (labeling.work.queue counts the assignment as live); closer
    to expiry this raises LeaseNearExpiry and the caller starts again with
    ``task_lock``.
    """
    assignment = assignment_locked(assignment_id=assignment_id, user_id=user_id, task_lock=task_lock)
    return _writable(assignment, assignment_id=assignment_id, now=now, task_lock=task_lock)


def assignment_lock_row_with_ratings(
    *, assignment_id: int, user_id: int | None, now: datetime, task_lock: bool, password_hash: str | None = None,
    with_labeler: bool = False,
) -> tuple[Assignment, list[RatingRow]]:  # fmt: skip
    """assignment_lock_row and the assignment's stored ratings (rating_rows), in one round trip when pipelined.

    ``password_hash``: the owner also has to be active with this password
    hash (a session verified without loading the user, annotate.auth.SessionUser).
    ``with_labeler``: ``assignment.labeler`` is their whole row, read by the locking read.
    """
    assignment, rows = assignment_locked_with_ratings(
        assignment_id=assignment_id, user_id=user_id, task_lock=task_lock, password_hash=password_hash,
        with_labeler=with_labeler,
    )  # fmt: skip
    return _writable(assignment, assignment_id=assignment_id, now=now, task_lock=task_lock), rows


def _writable(assignment: Assignment | None, *, assignment_id: int, now: datetime, task_lock: bool) -> Assignment:
    if assignment is None:
        raise AssignmentNotFound(assignment_id)
    if assignment.status != AssignmentStatus.IN_PROGRESS:
        raise AssignmentClosed(
            "This task was already submitted; it can no longer be changed."
            if assignment.status == AssignmentStatus.SUBMITTED
            else "Your lease on this task ran out and it went to another labeler."
        )
    if not task_lock and (assignment.lease_expires_at is None or assignment.lease_expires_at <= now + lease_margin()):
        raise LeaseNearExpiry
    return assignment


def assignment_time_add(assignment: Assignment, *, now: datetime) -> list[str]:
    """Add the gap since the last event to the time on task (a gap over IDLE_GAP_SECONDS adds nothing).

    For a service holding the assignment lock; returns the fields to save.
    """
    last = assignment.last_activity_at or assignment.started_at or now
    # Whole milliseconds, rounded down, in integer arithmetic: the one-statement
    # key press (labeling.work.hotpath.PRESS_PLAIN) counts the same in SQL.
    gap_ms = (now - last) // timedelta(milliseconds=1)
    if 0 < gap_ms <= settings.IDLE_GAP_SECONDS * 1000:
        assignment.total_time_ms = (assignment.total_time_ms or 0) + gap_ms
    assignment.last_activity_at = max(last, now)
    return ["total_time_ms", "last_activity_at"]


def rating_request_check(*, rating: int | None, version: int | None = None) -> None:
    """RatingRejected unless the rating is -1, 0, +1 or none, and the version (when given) is in range."""
    if rating not in (None, -1, 0, 1):
        raise RatingRejected("A rating is -1, 0 or +1.")
    if version is not None and not 1 <= version <= MAX_VERSION:
        raise RatingRejected("The version must be a positive integer.")


def assignment_abandon(
    *, assignment: Assignment, finish_reason: FinishReason, reason_text: str, now: datetime | None = None
) -> None:
    """Give up, or report the problem itself as bad; both need a short reason."""
    if finish_reason not in (FinishReason.GIVE_UP, FinishReason.BAD_PROBLEM):
        raise ValueError(f"not a reason to abandon a task: {finish_reason}")
    text = reason_text.strip()
    if not text:
        raise RatingRejected("Say briefly why.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = assignment_lock(assignment)
        assignment_finish(locked, reason=finish_reason, text=text, now=now)


def assignment_finish(
    assignment: Assignment, *, reason: FinishReason, text: str, now: datetime, rows: list[RatingRow] | None = None
) -> None:
    """Submit under the caller's locks (task, then assignment). ``rows``: the phase-2 ratings just read, if any."""
    assignment_time_add(assignment, now=now)
    assignment.status = AssignmentStatus.SUBMITTED
    assignment.submitted_at = now
    assignment.finish_reason = reason
    assignment.finish_reason_text = text
    assignment.version += 1
    # Read-only from here on, so the export can use a frozen copy of the label.
    assignment.label_steps_json = (
        label_steps_freeze(assignment_id=assignment.pk) if rows is None else _label_steps_json(rows)
    )
    # With the task closed when it now has all its labelers: the task row is
    # locked, so two labelers finishing the same multi-labeler task count
    # each other's submissions correctly.
    assignment_finish_write(assignment)


def _label_steps_json(rows: list[RatingRow]) -> str:
    """label_steps_freeze from the rows in hand: the same JSON (phase 2 never writes human_completion)."""
    steps: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r.index, r.completion)):
        step = steps.setdefault(r.index, {"completions": [], "human_completion": None, "chosen_completion": r.chosen})
        step["completions"].append({"text": r.text, "rating": r.rating, "flagged": r.flagged})
    return orjson.dumps(list(steps.values())).decode()
