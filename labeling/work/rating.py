"""Phase 2: rating the steps of a pre-generated solution, and submitting it. Every click is one call here.

Each rating request carries the full state of one completion (rating and flag)
and a ``version``: a counter the page increases with every click. A request is
applied only when its version is newer than the stored one, so a repeated
request changes nothing and a delayed one cannot overwrite a newer click.
That is the plain-form path (no JS) and the API's. The rating screen sends key
presses instead (``presses_apply``): each aimed at the assignment's state
version the labeler saw, applied in order or refused (docs/architecture.md,
"Key presses"). Both move ``Assignment.version`` on with every change.

The stored trajectory is kept consistent after every write (labeling.work.progress):
steps after the first -1 (or after an unrated step) are deleted in the same
transaction, the alternatives of the error step get a row each (rating null
until rated), and chosen_completion is 0 on steps the solution continued past
and null on the step where labeling stops.

The lock, time on task and the finish itself are the assignment's
(labeling.work.assignment), shared with phase 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from labeling.models import (
    Assignment,
    FinishReason,
    LabeledStep,
    Labeler,
    LabelerStatus,
    StepAlternative,
    StepRating,
)
from labeling.work.alternatives import Attach, alternatives_attach_locked
from labeling.work.assignment import (
    MAX_VERSION,
    LeaseNearExpiry,
    NotFinished,
    RatingRejected,
    assignment_finish,
    assignment_lock_row_with_ratings,
    assignment_time_add,
    is_phase_one,
    lease_margin,
    rating_request_check,
)
from labeling.work.candidates import candidates_prefetch
from labeling.work.hotpath import (
    RatingRow,
    assignment_touch,
    chosen_completion_set,
    labeled_step_add,
    labeled_step_id,
    pipelined,
    press_plain,
    rating_rows,
    rating_upsert,
)
from labeling.work.progress import Progress, chosen_completions, progress_compute
from labeling.work.queue import assignment_next_in_transaction, is_fresh_lease, lease_expiry


@dataclass(frozen=True)
class Rated:
    """What one rating request did, for the response: the page updates only what changed.

    ``ratings`` is the stored state of the assignment after the request, as
    (step index, completion index, text, rating, flagged, version) tuples in
    page order; it is None when ``reshaped`` (steps were dropped or
    alternatives added or removed), and the page is then rendered afresh.
    """

    applied: bool
    reshaped: bool
    assignment: Assignment
    ratings: list[tuple[int, int, str, int | None, bool | None, int]] | None
    # Where labeling stood before the request: the rows past it are new to the page.
    stop_before: int


def _progress(step_count: int, rows: list[RatingRow]) -> Progress:
    own = {r.index: r.rating for r in rows if r.completion == 0}
    first = progress_compute(step_count=step_count, own_ratings=own, alternative_ratings={})
    alternatives = {r.completion: r.rating for r in rows if r.completion > 0 and r.index == first.stop_index}
    return progress_compute(step_count=step_count, own_ratings=own, alternative_ratings=alternatives)


def step_rate(
    *,
    assignment_id: int,
    user_id: int | None,
    step_index: int,
    completion_index: int,
    rating: int | None,
    flagged: bool,
    version: int,
    now: datetime | None = None,
) -> Rated:
    """Store one completion's rating and flag; says what changed, so that the caller can answer with just that.

    ``user_id``: the signed-in labeler, whose assignment it must be
    (AssignmentNotFound otherwise), checked in the locking read; None for a
    service or test acting on an assignment it already holds. ``applied`` is
    False when the request was stale or a repeat (nothing changed).

    Queries, the common case (a step rated in place or the next step rated):
    one locking read of the assignment (ownership, status, lease, steps), one
    read of its ratings, one upsert (plus the new LabeledStep and the
    previous step's chosen_completion when a step is added) and one UPDATE of
    the assignment's time and lease.
    """
    rating_request_check(rating=rating, version=version)
    now = now or timezone.now()

    def rate(*, task_lock: bool) -> Rated:
        # Pipelined (labeling.work.hotpath.pipelined): four round trips in
        # all, BEGIN, the locking read with the ratings, the writes, COMMIT.
        with transaction.atomic(), pipelined():
            locked, rows = assignment_lock_row_with_ratings(
                assignment_id=assignment_id, user_id=user_id, now=now, task_lock=task_lock
            )
            rated, _rows = _rate(locked, rows, step_index, completion_index, rating, flagged, version, now=now)
            if rated.applied:
                _touch(locked, now=now)
            return rated

    try:
        return rate(task_lock=False)
    except LeaseNearExpiry:
        # Nothing was written; again, with the task row locked first.
        return rate(task_lock=True)


def _touch(locked: Assignment, *, now: datetime) -> None:
    assignment_time_add(locked, now=now)
    locked.lease_expires_at = lease_expiry(now=now)
    assignment_touch(locked)


def _rate(
    locked: Assignment,
    rows: list[RatingRow],
    step_index: int,
    completion_index: int,
    rating: int | None,
    flagged: bool,
    version: int,
    *,
    now: datetime,
) -> tuple[Rated, list[RatingRow]]:
    """One completion's write under the caller's lock, on the rows it read; the caller then touches the assignment.

    Returns what it did and the stored rows after it (re-read when the write
    reshaped the trajectory). Raises RatingRejected before writing anything.
    """
    solution = locked.task.solution
    steps: list[str] = solution.steps or []
    progress = _progress(len(steps), rows)
    existing = next((r for r in rows if r.index == step_index and r.completion == completion_index), None)

    if completion_index == 0:
        if not progress.can_rate_step(step_index):
            raise RatingRejected("Rate the earlier steps first: this step is not reached yet.")
        text = steps[step_index]
    else:
        if not (progress.stopped_at_error and step_index == progress.stop_index and existing is not None):
            raise RatingRejected("Alternatives are rated only at the step rated -1.")
        text = existing.text

    if (existing is not None and existing.version >= version) or (
        existing is None and version <= locked.ratings_reset_version  # a click on a rating a newer click deleted
    ):
        return Rated(
            applied=False,
            reshaped=False,
            assignment=locked,
            ratings=_page_order(rows),
            stop_before=progress.stop_index,
        ), rows

    # The release stores an unflagged original step as null and an
    # unflagged alternative as false; we write the same.
    stored_flag: bool | None = True if flagged else (None if completion_index == 0 else False)
    step_row = next((r for r in rows if r.index == step_index), None)
    added_step = step_row is None
    if step_row is None:
        # No get_or_create needed: the assignment row lock serialises
        # writers. Created as the last labeled step: chosen_completion null.
        labeled_step_add(assignment_id=locked.pk, index=step_index)
    step_id = None if step_row is None else step_row.step_id
    # A change of state: the state version moves past it (and past every
    # rating version, which the page's plain-form clicks number from it).
    locked.version = max(locked.version + 1, version)
    rating_upsert(
        assignment_id=locked.pk,
        index=step_index,
        completion_index=completion_index,
        text=text,
        rating=rating,
        flagged=stored_flag,
        version=version,
        now=now,
    )
    after = [r for r in rows if not (r.index == step_index and r.completion == completion_index)]
    after.append(
        RatingRow(step_id, step_index, None if added_step else (existing.chosen if existing else None),
             completion_index, rating, version, stored_flag, text)
    )  # fmt: skip

    reshaped = False
    if completion_index == 0:
        reshaped = _keep_trajectory_consistent(locked, steps=steps, rows=after, version=version)
        if reshaped:
            after = rating_rows(locked)
        else:
            # chosen_completion as just written, so that the next press of a
            # batch works on the stored state without reading it again.
            wanted = chosen_completions(labeled_indexes=sorted({r.index for r in after if r.completion == 0}))
            after = [r if wanted.get(r.index, r.chosen) == r.chosen else replace(r, chosen=wanted[r.index])
                     for r in after]  # fmt: skip

    return Rated(
        applied=True,
        reshaped=reshaped,
        assignment=locked,
        ratings=None if reshaped else _page_order(after),
        stop_before=progress.stop_index,
    ), after


MAX_PRESSES = 100  # in one batch; the page sends what it queued, in order, at most this many at a time


@dataclass(frozen=True)
class Press:
    """One key press (or click) as the page queued it: what it does to exactly one completion.

    ``version`` is the assignment's state version the page showed when the
    key was pressed: the press is applied only to that state. A rating press
    sets ``rating`` and keeps the stored flag; a flag press (``flag`` not
    None) sets the flag to that value and keeps the stored rating.
    """

    step_index: int
    completion_index: int
    version: int
    rating: int | None = None
    flag: bool | None = None


class PressRefusal(StrEnum):
    STALE = "stale"  # aimed at a state that is no longer the stored one (another tab, a lost answer)
    REJECTED = "rejected"  # does not fit the stored state (a step not reached yet)


@dataclass(frozen=True)
class Pressed:
    """What a batch did: the first ``applied`` presses were stored, in order; the rest were refused (if any)."""

    applied: int
    refusal: PressRefusal | None
    message: str
    reshaped: bool
    assignment: Assignment
    # The stored ratings after the batch, in page order, as Rated.ratings.
    ratings: list[tuple[int, int, str, int | None, bool | None, int]]


def presses_apply(
    *, assignment_id: int, user_id: int | None, presses: list[Press], now: datetime | None = None
) -> Pressed:
    """Apply a batch of key presses in order, in one transaction: each to exactly its completion, or stop.

    A press applies when its ``version`` is the stored state version; each
    applied press adds exactly one to it, so a page that queued several
    presses numbers them ahead (version, version + 1, ...). The first press
    that was aimed at another state (another tab changed the task, or the page
    missed an answer) or that does not fit the stored state is refused, and so
    is every press after it: they were aimed at a state that now will not
    exist. The caller answers with the stored state, never a guess.

    Queries: the locking read, one read of the ratings, per press the upsert
    (plus the new LabeledStep and chosen_completion when a step is added),
    and one UPDATE of the assignment; a press that drops steps re-reads them.
    """
    if len(presses) > MAX_PRESSES:
        raise RatingRejected(f"At most {MAX_PRESSES} key presses at a time.")
    for press in presses:
        rating_request_check(rating=press.rating, version=press.version + 1)
    now = now or timezone.now()

    def apply(*, task_lock: bool) -> Pressed:
        # Pipelined as step_rate: four round trips for the batch, however many presses.
        with transaction.atomic(), pipelined():
            locked, rows = assignment_lock_row_with_ratings(
                assignment_id=assignment_id, user_id=user_id, now=now, task_lock=task_lock
            )
            applied = 0
            reshaped = False
            refusal: PressRefusal | None = None
            message = ""
            for press in presses:
                if press.version != locked.version:
                    refusal = PressRefusal.STALE
                    message = "This task changed in another tab (or a save was lost)."
                    break
                existing = next(
                    (r for r in rows if r.index == press.step_index and r.completion == press.completion_index), None
                )
                rating = (existing.rating if existing else None) if press.flag is not None else press.rating
                flagged = press.flag if press.flag is not None else bool(existing and existing.flagged)
                try:
                    rated, rows = _rate(locked, rows, press.step_index, press.completion_index, rating, flagged,
                                        locked.version + 1, now=now)  # fmt: skip
                except RatingRejected as exc:
                    refusal = PressRefusal.REJECTED
                    message = str(exc)
                    break
                applied += 1
                reshaped = reshaped or rated.reshaped
            if applied:
                _touch(locked, now=now)
            return Pressed(
                applied=applied,
                refusal=refusal,
                message=message,
                reshaped=reshaped,
                assignment=locked,
                ratings=_page_order(rows),
            )

    try:
        return apply(task_lock=False)
    except LeaseNearExpiry:
        # Nothing was written; again, with the task row locked first.
        return apply(task_lock=True)


@dataclass(frozen=True)
class PlainPressed:
    """A key press stored in one statement (press_plain_apply): the state after it, as its answer tells the page."""

    version: int
    progress: Progress


def press_plain_apply(
    *, assignment_id: int, user_id: int, password_hash: str, press: Press, now: datetime | None = None
) -> PlainPressed | None:
    """One key press in one statement, when it is a plain one (labeling.work.hotpath.PRESS_PLAIN); else None.

    A plain press rates a step 0 or +1, rates the next step -1 where there
    are no alternatives to rate after it, or flags a rated step, on a
    trajectory with no -1 and no alternatives yet, on the state version the
    page showed: most presses. It is stored exactly as presses_apply stores
    it, in one round trip instead of four. ``user_id`` and ``password_hash``: the
    signed-in user as the session was verified (annotate.auth.SessionUser);
    the statement checks that they still hold. None: nothing was written
    (another press, another state, another user, or not PostgreSQL), and the
    caller applies the press with presses_apply, which refuses what the rules
    refuse.
    """
    if press.completion_index != 0 or press.version >= MAX_VERSION:
        return None
    if press.flag is None and press.rating == -1 and settings.STEPGEN_BACKEND != "none":
        return None  # the step generator is asked for alternatives (candidates_prefetch): not tried
    now = now or timezone.now()
    stored = press_plain(
        assignment_id=assignment_id,
        user_id=user_id,
        password=password_hash,
        step_index=press.step_index,
        rating=press.rating,
        flag=press.flag,
        version=press.version,
        now=now,
        lease_margin_at=now + lease_margin(),
        lease_expires_at=lease_expiry(now=now),
        idle_ms=settings.IDLE_GAP_SECONDS * 1000,
    )
    if stored is None:
        return None
    stopped = press.flag is None and press.rating == -1
    progress = Progress(
        stop_index=press.step_index if stopped else stored.labeled,
        stopped_at_error=stopped,
        alternatives_pending=(),
        step_count=stored.step_count,
    )
    return PlainPressed(version=stored.version, progress=progress)


def _page_order(rows: list[RatingRow]) -> list[tuple[int, int, str, int | None, bool | None, int]]:
    return [(r.index, r.completion, r.text, r.rating, r.flagged, r.version) for r in sorted(
        rows, key=lambda r: (r.index, r.completion))]  # fmt: skip


def _keep_trajectory_consistent(
    assignment: Assignment, *, steps: list[str], rows: list[RatingRow], version: int
) -> bool:
    """Drop what the new own rating cut off, add the error step's alternatives, fix chosen_completion.

    ``rows`` is the stored state after the write. True when rows were
    deleted or alternatives created (the page must be rendered afresh).
    """
    own = {r.index: r.rating for r in rows if r.completion == 0}
    progress = progress_compute(step_count=len(steps), own_ratings=own, alternative_ratings={})
    stop = progress.stop_index
    deleted = 0
    if any(r.index > stop for r in rows):
        deleted = LabeledStep.objects.filter(assignment=assignment, index__gt=stop).delete()[0]
    stale_alternatives = [r for r in rows if r.completion > 0 and not (progress.stopped_at_error and r.index == stop)]
    if stale_alternatives:
        StepRating.objects.filter(step__assignment=assignment, completion_index__gt=0).exclude(
            step__index=stop if progress.stopped_at_error else -1
        ).delete()
    stops_at_a_stored_step = stop in own  # rated -1, or a flag without a rating
    if deleted or stale_alternatives or stops_at_a_stored_step:
        # This click ended the trajectory here (or dropped ratings): an older
        # click on a later step, arriving late, must not re-create its row.
        assignment.ratings_reset_version = max(assignment.ratings_reset_version, version)

    created = False
    if progress.stopped_at_error and not any(r.completion > 0 and r.index == stop for r in rows):
        alternatives = list(
            StepAlternative.objects.filter(solution_id=assignment.task.solution_id, step_index=stop).order_by("ordinal")
        )
        if alternatives:
            step_id = labeled_step_id(assignment_id=assignment.pk, index=stop, rows=rows)
            StepRating.objects.bulk_create(
                StepRating(step_id=step_id, completion_index=a.ordinal, text=a.text, rating=None, flagged=False)
                for a in alternatives
            )
            created = True
        else:
            # None stored: ask the step generator for some. The claim is written
            # in this transaction and the worker queued after commit; they are
            # attached once ready (labeling.work.alternatives).
            candidates_prefetch(assignment_id=assignment.pk, step_index=stop)

    # chosen_completion from what the rows say is stored (no re-read).
    stored = {r.index: r.chosen for r in rows if r.completion == 0 and r.index <= stop}
    wanted = chosen_completions(labeled_indexes=sorted(stored))
    for value in (0, None):
        changed = [i for i, c in wanted.items() if c == value and stored[i] != value]
        if changed:
            chosen_completion_set(assignment_id=assignment.pk, indexes=changed, value=value)
    return bool(deleted or stale_alternatives or created)


class TaskChanged(Exception):
    """Submit was asked for from a page that showed an older state than the stored one."""


@dataclass(frozen=True)
class _Submitted:
    reason: FinishReason | None  # None: not finished (nothing submitted)
    attach: Attach
    stopped_at_error: bool
    labeler: Labeler | None = None  # read with the locks, when asked for


def _submit_locked(
    *, assignment_id: int, user_id: int | None, version: int | None, now: datetime, password_hash: str | None = None,
    with_labeler: bool = False,
) -> _Submitted:  # fmt: skip
    # Inside the caller's transaction: lock, read, attach or finish. Not
    # finished is not an exception here, so that alternatives just attached
    # are committed before the caller refuses the submit.
    locked, rows = assignment_lock_row_with_ratings(
        assignment_id=assignment_id, user_id=user_id, now=now, task_lock=True, password_hash=password_hash,
        with_labeler=with_labeler,
    )  # fmt: skip
    if version is not None and version != locked.version:
        raise TaskChanged("This task changed in another tab. Here is what is stored: check it, then submit.")
    if is_phase_one(locked):
        # Phase 1 ends when the solution reaches a final answer (labeling.work.phase_one).
        raise NotFinished("Continue until the solution reaches its final answer, or give up.")
    steps = locked.task.solution.steps or []
    # Alternatives generated for the error step are attached here and
    # committed, then the labeler rates them before finishing.
    attach = alternatives_attach_locked(locked, steps, rows)
    progress = _progress(len(steps), rows)
    reason = progress.ready_reason if attach == Attach.NOTHING else None
    if reason is not None:
        assignment_finish(locked, reason=reason, text="", now=now, rows=rows)
    return _Submitted(reason=reason, attach=attach, stopped_at_error=progress.stopped_at_error,
                      labeler=locked.labeler if with_labeler else None)  # fmt: skip


def _finished(submitted: _Submitted) -> FinishReason:
    if submitted.attach == Attach.PENDING:
        raise NotFinished("Other candidates for this step are still being generated; submit again in a moment.")
    if submitted.reason is None:
        raise NotFinished(
            "Rate every alternative of the step you marked -1 first."
            if submitted.stopped_at_error
            else "Rate every step first, or stop at the first step you rate -1."
        )
    return submitted.reason


def assignment_submit(
    *, assignment_id: int, user_id: int | None, version: int | None = None, now: datetime | None = None
) -> FinishReason:
    """Finish with the reason the ratings call for (found_error or solution).

    ``user_id`` as for step_rate: the owner is checked in the locking read.
    ``version``: the state version the page showed; TaskChanged when the
    stored state is another (the labeler submits only what they saw).
    """
    now = now or timezone.now()
    with transaction.atomic(), pipelined():
        submitted = _submit_locked(assignment_id=assignment_id, user_id=user_id, version=version, now=now)
    return _finished(submitted)


@dataclass(frozen=True)
class Handout:
    """What a submit that hands out the next task did."""

    reason: FinishReason
    following: Assignment | None  # None: nothing waiting, or the labeler may not work (see labeler.status)
    fresh: bool  # following was leased just now: it has no ratings and no alternatives being generated
    labeler: Labeler  # as the hand-out left them (a status it changed included)
    screening_decided: bool = False  # the hand-out ended the labeler's screening (passed or failed)


def assignment_submit_and_next(
    *,
    assignment_id: int,
    user_id: int | None,
    labeler: Labeler | None,
    version: int | None = None,
    now: datetime | None = None,
    password_hash: str | None = None,
) -> Handout:
    """assignment_submit, then the labeler's next task (labeling.work.queue), in one transaction.

    One BEGIN and one COMMIT (one WAL flush) instead of two of each. Lock
    order: the submitted task and its assignment, then the labeler, then the
    next task (SKIP LOCKED), so a hand-out of the submitted task to someone
    else waits for the submit, as before. A submit that is refused
    (NotFinished, AssignmentClosed, TaskChanged) hands out nothing.

    ``labeler``: the signed-in labeler, or None for a caller that loaded
    neither them nor their user (annotate.auth.SessionUser): the labeler row
    is then read by the submit's locking read itself, and the owner's check
    takes ``password_hash`` (the user still active, with that hash).
    """
    if labeler is None and (user_id is None or password_hash is None):
        raise ValueError("without a labeler, the signed-in user's id and password hash")
    now = now or timezone.now()
    status_before: str | None = None
    for attempt in (1, 2):
        try:
            # Pipelined: the submit's writes travel with the hand-out's first read.
            with transaction.atomic(), pipelined():
                submitted = _submit_locked(
                    assignment_id=assignment_id, user_id=user_id, version=version, now=now,
                    password_hash=password_hash, with_labeler=labeler is None,
                )  # fmt: skip
                found = labeler or submitted.labeler
                assert found is not None  # read with the owner's check, which found their assignment
                working: Labeler = found
                if status_before is None:
                    # The first attempt's: a retry's labeler object may carry that attempt's rolled-back change.
                    status_before = working.status
                following = (
                    assignment_next_in_transaction(labeler=working, now=now) if submitted.reason is not None else None
                )
            break
        except IntegrityError:
            # assignment_one_in_progress_per_labeler: another request of this
            # labeler leased a task first. Everything here was rolled back;
            # again, and the hand-out resumes that lease.
            if attempt == 2:
                raise
    reason = _finished(submitted)
    return Handout(
        reason=reason,
        following=following,
        fresh=following is not None and is_fresh_lease(following, now=now),
        labeler=working,
        screening_decided=status_before == LabelerStatus.SCREENING and working.status != LabelerStatus.SCREENING,
    )
