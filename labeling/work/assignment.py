"""An assignment from hand-out to finish: the lock, time on task, finishing and giving up.

Phase 2 (labeling.work.rating) and phase 1 (labeling.work.phase_one) share all
of it: one assignment row lock serialises every write to an assignment, time on
task is measured on the server, and a finish freezes the label.

Time on task: each event (rating, finish) adds the gap since the previous event
to ``total_time_ms``, except that a gap longer than ``settings.IDLE_GAP_SECONDS``
counts as 0 (the labeler was away).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, models, transaction
from django.db.models import Count, F, OuterRef, Subquery
from django.utils import timezone

from labeling.data.labels import label_steps_freeze
from labeling.models import Assignment, AssignmentStatus, FinishReason, Solution, Task, TaskStatus

MAX_VERSION = 2_000_000_000  # StepRating.version is a PositiveIntegerField.


class AssignmentNotFound(Exception):
    """No such assignment, or it is someone else's: the caller answers as for a missing one."""


class AssignmentClosed(Exception):
    """The assignment was submitted or its lease went to someone else: it is read-only."""


class RatingRejected(Exception):
    """The request does not fit the state of the assignment (e.g. a step that is not reached yet)."""


class NotFinished(Exception):
    """Submit was asked for while steps or alternatives are still unrated."""


@dataclass(frozen=True)
class RatingRow:
    """One stored phase-2 rating with its step, as the rating service reads them."""

    step_id: int
    index: int
    chosen: int | None
    completion: int
    rating: int | None
    version: int
    flagged: bool | None = None
    text: str = ""


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


_M = TypeVar("_M", bound=models.Model)


def _partial(model: type[_M], values: dict[str, Any]) -> _M:
    # A model instance from some of its columns (the others deferred), as the
    # ORM builds one from a query, so that save(update_fields=...) works on it.
    names = [f.attname for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(connection.alias, names, [values[n] for n in names])


# Everything a rating reads about its assignment, in one statement that also
# checks ownership (the labeler's user id, when given) and takes the row lock.
_RATE_LOCK_SQL = """
    SELECT a.id, a.task_id, a.labeler_id, a.status, a.started_at, a.last_activity_at, a.lease_expires_at,
           a.total_time_ms, a.ratings_reset_version, t.solution_id AS t_solution_id,
           t.generation_id AS t_generation_id, t.kind AS t_kind, t.status AS t_status,
           t.labelers_needed AS t_labelers_needed, s.problem_id AS s_problem_id, s.steps AS s_steps
    FROM labeling_assignment a
    JOIN labeling_task t ON t.id = a.task_id
    JOIN labeling_solution s ON s.id = t.solution_id
    WHERE a.id = %s{owner}{lock}
"""


def _lease_margin() -> timedelta:
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
    lock the task row first, the order labeling.queue uses, so that a
    hand-over of this task to someone else (which may mark this assignment
    EXPIRED) and this write wait for each other instead of deadlocking or
    racing; finishing needs it too (it counts the task's submissions). A
    rating may go without: while the lease is comfortably alive no hand-over
    can take the task (labeling.queue counts the assignment as live); closer
    to expiry this raises LeaseNearExpiry and the caller starts again with
    ``task_lock``.
    """
    params: list[Any] = [assignment_id]
    owner = ""
    if user_id is not None:
        owner = " AND a.labeler_id = (SELECT id FROM labeling_labeler WHERE user_id = %s)"
        params.append(user_id)
    lock = " FOR UPDATE OF a" if connection.features.has_select_for_update_of else ""
    with connection.cursor() as cursor:
        if task_lock and connection.features.has_select_for_update:
            cursor.execute(
                "SELECT t.id FROM labeling_task t JOIN labeling_assignment a ON a.task_id = t.id"
                f" WHERE a.id = %s{owner} FOR UPDATE OF t",
                params,
            )
        cursor.execute(_RATE_LOCK_SQL.format(owner=owner, lock=lock), params)
        row = cursor.fetchone()
        if row is None:
            raise AssignmentNotFound(assignment_id)
        values = dict(zip([c[0] for c in cursor.description], row, strict=True))
    assignment = _partial(Assignment, {k: v for k, v in values.items() if not k.startswith(("t_", "s_"))})
    for name in ("started_at", "last_activity_at", "lease_expires_at"):
        # SQLite hands back naive UTC datetimes to a raw query.
        value = getattr(assignment, name)
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value is not None and timezone.is_naive(value):
            value = timezone.make_aware(value, UTC)
        setattr(assignment, name, value)
    steps = values["s_steps"]
    solution = _partial(
        Solution,
        {
            "id": values["t_solution_id"],
            "problem_id": values["s_problem_id"],
            "steps": json.loads(steps) if isinstance(steps, str) else steps,
        },
    )
    task = _partial(
        Task,
        {
            "id": assignment.task_id,
            "generation_id": values["t_generation_id"],
            "solution_id": solution.pk,
            "kind": values["t_kind"],
            "labelers_needed": values["t_labelers_needed"],
            "status": values["t_status"],
        },
    )
    task.solution = solution
    assignment.task = task
    if assignment.status != AssignmentStatus.IN_PROGRESS:
        raise AssignmentClosed(
            "This task was already submitted; it can no longer be changed."
            if assignment.status == AssignmentStatus.SUBMITTED
            else "Your lease on this task ran out and it went to another labeler."
        )
    if not task_lock and (assignment.lease_expires_at is None or assignment.lease_expires_at <= now + _lease_margin()):
        raise LeaseNearExpiry
    return assignment


def assignment_time_add(assignment: Assignment, *, now: datetime) -> list[str]:
    """Add the gap since the last event to the time on task (a gap over IDLE_GAP_SECONDS adds nothing).

    For a service holding the assignment lock; returns the fields to save.
    """
    last = assignment.last_activity_at or assignment.started_at or now
    gap_ms = int((now - last).total_seconds() * 1000)
    if 0 < gap_ms <= settings.IDLE_GAP_SECONDS * 1000:
        assignment.total_time_ms = (assignment.total_time_ms or 0) + gap_ms
    assignment.last_activity_at = max(last, now)
    return ["total_time_ms", "last_activity_at"]


def rating_rows(assignment: Assignment) -> list[RatingRow]:
    # Raw SQL: this runs on every click, and compiling the ORM query cost
    # more than the query itself.
    with connection.cursor() as cursor:
        cursor.execute(
            'SELECT r.step_id, s."index", s.chosen_completion, r.completion_index, r.rating, r.version, r.flagged,'
            " r.text FROM labeling_steprating r JOIN labeling_labeledstep s ON s.id = r.step_id"
            ' WHERE s.assignment_id = %s ORDER BY s."index", r.completion_index',
            [assignment.pk],
        )
        return [
            RatingRow(step_id=s, index=i, chosen=ch, completion=c, rating=r, version=v,
                 flagged=None if f is None else bool(f), text=t)
            for s, i, ch, c, r, v, f, t in cursor.fetchall()
        ]  # fmt: skip


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
    fields = assignment_time_add(assignment, now=now)
    assignment.status = AssignmentStatus.SUBMITTED
    assignment.submitted_at = now
    assignment.finish_reason = reason
    assignment.finish_reason_text = text
    # Read-only from here on, so the export can use a frozen copy of the label.
    assignment.label_steps_json = (
        label_steps_freeze(assignment_id=assignment.pk) if rows is None else _label_steps_json(rows)
    )
    assignment.save(
        update_fields=[*fields, "status", "submitted_at", "finish_reason", "finish_reason_text", "label_steps_json"]
    )
    # The task row is locked, so two labelers finishing the same
    # multi-labeler task count each other's submissions correctly.
    submitted = Assignment.objects.filter(task_id=OuterRef("pk"), status=AssignmentStatus.SUBMITTED)
    Task.objects.filter(pk=assignment.task_id, status=TaskStatus.OPEN).alias(
        submitted=Subquery(submitted.order_by().values("task_id").annotate(n=Count("pk")).values("n"))
    ).filter(submitted__gte=F("labelers_needed")).update(status=TaskStatus.DONE)


def _label_steps_json(rows: list[RatingRow]) -> str:
    """label_steps_freeze from the rows in hand: the same JSON (phase 2 never writes human_completion)."""
    steps: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r.index, r.completion)):
        step = steps.setdefault(r.index, {"completions": [], "human_completion": None, "chosen_completion": r.chosen})
        step["completions"].append({"text": r.text, "rating": r.rating, "flagged": r.flagged})
    return orjson.dumps(list(steps.values())).decode()
