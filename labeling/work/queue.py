"""The task queue: which task a labeler gets next, and leases on it.

A task is leased, not given. ``assignment_next`` hands out the highest-priority
open task of an open generation (phase 1 or 2) that the labeler has not had, while the
task has fewer live assignments than ``Task.labelers_needed``; a live
assignment is a submitted one or one whose lease has not run out. Each rating
renews the lease (labeling.work.rating).

Expired leases, decided rule: a lease that runs out returns the task to the
queue, but nothing is deleted. The labeler keeps their assignment (and its
ratings) while nobody else takes the task: asking for work again resumes it.
When another labeler is handed the task, every lapsed in-progress assignment
on it is marked EXPIRED; its ratings stay in the database for audit, and the
exporter reads only submitted assignments.

Who gets what (docs/quality.md): a labeler in screening gets only the
screening set, in its fixed order, each item once, and is admitted or failed
when they have had all of it. An active labeler gets normal work, except that
with probability QC_RATE a call hands out a random QC item of an open
generation they have not had (each at most once per person, only when normal
work exists too). Screening and QC items are not capped by labelers_needed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from labeling.labelers import labeler_can_take_work, labeler_needs_screening
from labeling.models import (
    Assignment,
    AssignmentStatus,
    Labeler,
    LabelerStatus,
    Task,
    TaskKind,
)
from labeling.quality.control import (
    labeler_quality_enforce,
    labeler_screening_conclude,
    rolling_window_sent,
    screening_set_ids,
)
from labeling.work.hotpath import (
    assignment_lease,
    labeler_lock_sent,
    open_generation_ids,
    open_generation_ids_sent,
    quality_control_unseen_ids,
    task_candidate,
    task_places,
)

# Candidates locked per generation before giving up on it for this request;
# a miss means another transaction assigned the row between our snapshot and
# our lock (see _claim), which is rare, so a handful is plenty.
_CANDIDATES_PER_GENERATION = 5


class LabelerMayNotWork(Exception):
    """The labeler's status does not allow them to be handed tasks."""


def lease_expiry(*, now: datetime) -> datetime:
    return now + timedelta(seconds=settings.LEASE_SECONDS)


def assignment_next(
    *, labeler: Labeler, now: datetime | None = None, rng: random.Random | None = None
) -> Assignment | None:
    """The labeler's current assignment, or a newly leased one; None when the queue is empty for them.

    Raises LabelerMayNotWork when the labeler may not be handed tasks, also
    when this very call changed their status (failed screening, suspended);
    ``labeler`` then carries the new status. ``rng`` decides QC serving
    (tests pass a seeded one).
    """
    if not labeler_can_take_work(labeler):
        raise LabelerMayNotWork(labeler.get_status_display())
    now = now or timezone.now()
    rng = rng or _RNG
    try:
        outcome = _assignment_next(labeler=labeler, now=now, rng=rng)
    except IntegrityError:
        # assignment_one_in_progress_per_labeler: a second request of the same
        # labeler (double click, another tab) leased a task first. Its lease is
        # now committed and visible, so the retry returns it.
        outcome = _assignment_next(labeler=labeler, now=now, rng=rng)
    if outcome is _REFUSED:
        # Outside the transaction: a status change made by this call (screening
        # failed, quality suspension) is committed, not rolled back by the raise.
        raise LabelerMayNotWork(labeler.get_status_display())
    assert outcome is None or isinstance(outcome, Assignment)
    return outcome


class _Refused:
    pass


_REFUSED = _Refused()
# Not for secrets: decides only whether this hand-out is a QC item.
_RNG = random.Random()


def assignment_next_in_transaction(
    *, labeler: Labeler, now: datetime, rng: random.Random | None = None
) -> Assignment | None:
    """assignment_next inside the caller's transaction, with no savepoint of its own (submit + next is one).

    None when nothing is waiting and when the labeler may not be handed work;
    ``labeler`` then carries the status, and a change this call made to it is
    committed with the caller's transaction. An IntegrityError (a second
    request of the same labeler leased first) aborts the caller's transaction:
    the caller starts it again, and the retry resumes that lease.
    """
    if not labeler_can_take_work(labeler):
        return None
    outcome = _assignment_next_locked(labeler=labeler, now=now, rng=rng or _RNG, read_ahead=True)
    return outcome if isinstance(outcome, Assignment) else None


def is_fresh_lease(assignment: Assignment, *, now: datetime) -> bool:
    """Whether ``assignment`` was leased by the call that was given ``now`` (not resumed): it has no ratings yet.

    _lease sets started_at to that very ``now`` object; a resumed assignment's
    comes from the database, so identity tells the two apart exactly.
    """
    return assignment.started_at is now


def _assignment_next(*, labeler: Labeler, now: datetime, rng: random.Random) -> Assignment | _Refused | None:
    with transaction.atomic():
        return _assignment_next_locked(labeler=labeler, now=now, rng=rng)


def _assignment_next_locked(
    *, labeler: Labeler, now: datetime, rng: random.Random, read_ahead: bool = False
) -> Assignment | _Refused | None:
    # read_ahead: the labeler just finished their lease (submit + next), so a
    # new task is what this hand-out will most likely look for.
    # The labeler's own row, locked: the status read here decides what
    # they may be handed, and a status change (admission, suspension,
    # admin override in labeler_set_status) must not interleave with a
    # hand-out that read the old one. Two requests of the same person
    # queue here instead of racing. The same statement reads their
    # in-progress assignment (LABELER_LOCK).
    lock = labeler_lock_sent(labeler_id=labeler.pk)
    window: Callable[[], list[int]] | None = None
    generations: Callable[[], list[int]] | None = None
    window_since = labeler.status_changed_at  # the status the window is asked for
    if read_ahead and labeler.status == LabelerStatus.ACTIVE:
        # Sent behind the lock, so they run once it is held, and read with
        # its answer (pipelined: one round trip for the three,
        # hotpath.labeler_lock_sent): what an active labeler's new hand-out
        # reads next, the QC window for the status read before the lock, and
        # the open generations. Not for a labeler who may hold a lease to
        # resume, which needs neither.
        window = rolling_window_sent(labeler=labeler)
        generations = open_generation_ids_sent()
    locked = lock()
    window_ids = window() if window is not None else None
    generation_ids = generations() if generations is not None else None
    if locked is None:
        return _REFUSED
    (labeler.status, labeler.status_reason, labeler.status_changed_at, labeler.qc_window_passed), in_progress = locked
    if window is not None and (labeler.status != LabelerStatus.ACTIVE or window_since != labeler.status_changed_at):
        window_ids = None  # the status changed meanwhile: that window is another status's, read it again
    if not labeler_can_take_work(labeler):
        return _REFUSED
    current = _resume_current(current=in_progress, now=now) if in_progress is not None else None
    if current is not None:
        if not labeler_needs_screening(labeler) or current.task.kind == TaskKind.SCREENING:
            return current
        # Only reachable by editing the status around the service; never
        # let an unscreened person continue normal work.
        Assignment.objects.filter(pk=current.pk).update(status=AssignmentStatus.EXPIRED)
    if labeler_needs_screening(labeler):
        screening = _next_screening(labeler=labeler, now=now)
        if screening is not None:
            return screening
        labeler_screening_conclude(labeler=labeler, now=now)
        if labeler.status == LabelerStatus.SCREENING:
            return None  # no screening set yet, or it is still being built
        if labeler.status != LabelerStatus.ACTIVE:
            return _REFUSED
    if labeler_quality_enforce(labeler=labeler, now=now, window_ids=window_ids):
        return _REFUSED
    if generation_ids is None:
        generation_ids = open_generation_ids()
    return _next_work(labeler=labeler, now=now, rng=rng, generation_ids=generation_ids)


def _lease(*, task: Task, labeler: Labeler, now: datetime) -> Assignment:
    return assignment_lease(task=task, labeler=labeler, now=now, lease_expires_at=lease_expiry(now=now))


def _next_screening(*, labeler: Labeler, now: datetime) -> Assignment | None:
    # Screening items go to every labeler (labelers_needed does not cap them),
    # in the set's fixed order, each once; no task lock is needed because no
    # one else's hand-out can take this labeler's place.
    set_ids = screening_set_ids()
    had = set(Assignment.objects.filter(labeler=labeler, task_id__in=set_ids).values_list("task_id", flat=True))
    for task_id in set_ids:
        if task_id not in had:
            return _lease(task=Task.objects.get(pk=task_id), labeler=labeler, now=now)
    return None


def _next_work(*, labeler: Labeler, now: datetime, rng: random.Random, generation_ids: list[int]) -> Assignment | None:
    # Phase-1 work (one task per problem, on its placeholder solution) is
    # served like phase-2 work, best priority first across generations
    # (generation_ids: hotpath.OPEN_GENERATIONS, read with the labeler's lock).
    best: _Claim | None = None
    for generation_id in generation_ids:
        claim = _claim_in_generation(generation_id=generation_id, labeler=labeler, now=now)
        if claim is not None and (best is None or claim.order < best.order):
            best = claim
    if best is None:
        # No QC item either: handing one out when there is no normal work
        # would tell the labeler that it is a QC item.
        return None
    if rng.random() < settings.QC_RATE:
        unseen = quality_control_unseen_ids(labeler_id=labeler.pk)
        if unseen:
            # A random unseen item, so the order differs between labelers;
            # loaded with what the task screen shows of it.
            task = Task.objects.select_related("solution__problem").get(pk=rng.choice(unseen))
            return _lease(task=task, labeler=labeler, now=now)
    if best.lapsed:
        # They lost the lease (it ran out) and someone else now has the task.
        Assignment.objects.filter(
            task=best.task, status=AssignmentStatus.IN_PROGRESS, lease_expires_at__lte=now
        ).update(status=AssignmentStatus.EXPIRED)
    return _lease(task=best.task, labeler=labeler, now=now)


def _resume_current(*, current: Assignment, now: datetime) -> Assignment | None:
    if current.lease_expires_at is not None and current.lease_expires_at > now:
        # A live lease is never handed over, so renewing it needs no lock:
        # the condition in the UPDATE is the whole check.
        renewed = lease_expiry(now=now)
        if Assignment.objects.filter(
            pk=current.pk, status=AssignmentStatus.IN_PROGRESS, lease_expires_at__gt=now
        ).update(lease_expires_at=renewed):
            current.lease_expires_at = renewed
            return current
    # Lock order is task, then assignment, everywhere (here, labeling.work.assignment
    # and _claim's expiry update), so a rating and a hand-over of the same
    # task wait for each other instead of deadlocking.
    Task.objects.select_for_update().filter(pk=current.task_id).values_list("pk").first()
    relocked = Assignment.objects.select_for_update().filter(pk=current.pk).first()
    if relocked is None or relocked.status != AssignmentStatus.IN_PROGRESS:
        return None
    # A lapsed lease that is still IN_PROGRESS was not handed to anyone else
    # (hand-over marks it EXPIRED), so resuming cannot over-assign the task.
    relocked.lease_expires_at = lease_expiry(now=now)
    relocked.save(update_fields=["lease_expires_at"])
    return relocked


@dataclass(frozen=True)
class _Claim:
    task: Task
    priority: float
    lapsed: int  # in-progress assignments on the task whose lease ran out

    @property
    def order(self) -> tuple[float, int]:
        return (-self.priority, self.task.pk)


def _claim_in_generation(*, generation_id: int, labeler: Labeler, now: datetime) -> _Claim | None:
    # Screening and QC items are served apart (_next_screening, _next_work).
    tried: list[int] = []
    for _ in range(_CANDIDATES_PER_GENERATION):
        # Two labelers asking at the same moment must not both take a task
        # that needs one labeler: lock the candidate row, and let concurrent
        # requests skip rows that are being handed out instead of queueing
        # behind them (SQLite ignores this; its IMMEDIATE transactions already
        # serialise writers).
        found = task_candidate(
            generation_id=generation_id, labeler_id=labeler.pk, now=now, tried=tried, skip_locked=True
        )
        if found is None:
            # Every remaining candidate is locked by a concurrent hand-over.
            # Those commit within milliseconds and may leave places free
            # (labelers_needed > 1), so wait for the best one instead of
            # telling this labeler there is no work; _still_free re-counts.
            found = task_candidate(
                generation_id=generation_id, labeler_id=labeler.pk, now=now, tried=tried, skip_locked=False
            )
            if found is None:
                return None
        task_id, priority, labelers_needed = found
        claim = _still_free(
            task_id=task_id, priority=priority, labelers_needed=labelers_needed, labeler=labeler, now=now
        )
        if claim is not None:
            return claim
        tried.append(task_id)
    return None


def _still_free(
    *, task_id: int, priority: float, labelers_needed: int, labeler: Labeler, now: datetime
) -> _Claim | None:
    # The candidate query ran on a snapshot taken before we held the lock: a
    # transaction that leased this task and committed between that snapshot
    # and our lock is invisible to it. TASK_STILL_FREE re-counts with a new
    # statement, and loads the task with its solution and problem, which the
    # task screen shows next.
    places = task_places(task_id=task_id, labeler_id=labeler.pk, now=now)
    if places.mine == 0 and places.live < labelers_needed:
        return _Claim(task=places.task, priority=priority, lapsed=places.lapsed)
    return None
