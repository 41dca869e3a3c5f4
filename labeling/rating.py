"""Rating steps and finishing an assignment: every click is one call here.

Each rating request carries the full state of one completion (rating and flag)
and a ``version``: a counter the page increases with every click. A request is
applied only when its version is newer than the stored one, so a repeated
request changes nothing and a delayed one cannot overwrite a newer click.

The stored trajectory is kept consistent after every write (labeling.progress):
steps after the first -1 (or after an unrated step) are deleted in the same
transaction, the alternatives of the error step get a row each (rating null
until rated), and chosen_completion is 0 on steps the solution continued past
and null on the step where labeling stops.

Time on task is measured here, on the server: each event (rating, finish) adds
the gap since the previous event to ``total_time_ms``, except that a gap longer
than ``settings.IDLE_GAP_SECONDS`` counts as 0 (the labeler was away).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from labeling.exports import label_steps_freeze
from labeling.models import (
    Assignment,
    AssignmentStatus,
    CandidateSetStatus,
    FinishReason,
    LabeledStep,
    StepAlternative,
    StepCandidateSet,
    StepRating,
    Task,
    TaskStatus,
)
from labeling.progress import Progress, chosen_completions, progress_compute
from labeling.queue import lease_expiry

MAX_VERSION = 2_000_000_000  # StepRating.version is a PositiveIntegerField.


class AssignmentClosed(Exception):
    """The assignment was submitted or its lease went to someone else: it is read-only."""


class RatingRejected(Exception):
    """The request does not fit the state of the assignment (e.g. a step that is not reached yet)."""


class NotFinished(Exception):
    """Submit was asked for while steps or alternatives are still unrated."""


@dataclass(frozen=True)
class _Row:
    step_id: int
    index: int
    chosen: int | None
    completion: int
    rating: int | None
    version: int
    flagged: bool | None = None
    text: str = ""


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


def _lock(assignment: Assignment) -> Assignment:
    # Lock order is task, then assignment, as in labeling.queue: a hand-over
    # of this task to someone else (which may mark this assignment EXPIRED)
    # and this write wait for each other instead of deadlocking or racing.
    Task.objects.select_for_update().filter(pk=assignment.task_id).values_list("pk").first()
    # Every write to one assignment is serialised by this row lock, which is
    # what makes the version check and the get-or-create below race-free.
    locked = Assignment.objects.select_for_update(of=("self",)).select_related("task__solution").get(pk=assignment.pk)
    if locked.status != AssignmentStatus.IN_PROGRESS:
        raise AssignmentClosed(
            "This task was already submitted; it can no longer be changed."
            if locked.status == AssignmentStatus.SUBMITTED
            else "Your lease on this task ran out and it went to another labeler."
        )
    return locked


def _account_time(assignment: Assignment, *, now: datetime) -> list[str]:
    last = assignment.last_activity_at or assignment.started_at or now
    gap_ms = int((now - last).total_seconds() * 1000)
    if 0 < gap_ms <= settings.IDLE_GAP_SECONDS * 1000:
        assignment.total_time_ms = (assignment.total_time_ms or 0) + gap_ms
    assignment.last_activity_at = max(last, now)
    return ["total_time_ms", "last_activity_at"]


def _rows(assignment: Assignment) -> list[_Row]:
    return [
        _Row(step_id=s, index=i, chosen=ch, completion=c, rating=r, version=v, flagged=f, text=t)
        for s, i, ch, c, r, v, f, t in StepRating.objects.filter(step__assignment=assignment)
        .order_by("step__index", "completion_index")
        .values_list(
            "step_id",
            "step__index",
            "step__chosen_completion",
            "completion_index",
            "rating",
            "version",
            "flagged",
            "text",
        )
    ]


def _progress(step_count: int, rows: list[_Row]) -> Progress:
    own = {r.index: r.rating for r in rows if r.completion == 0}
    first = progress_compute(step_count=step_count, own_ratings=own, alternative_ratings={})
    alternatives = {r.completion: r.rating for r in rows if r.completion > 0 and r.index == first.stop_index}
    return progress_compute(step_count=step_count, own_ratings=own, alternative_ratings=alternatives)


def assignment_progress(*, assignment: Assignment) -> Progress:
    steps = assignment.task.solution.steps or []
    return _progress(len(steps), _rows(assignment))


def step_rate(
    *,
    assignment: Assignment,
    step_index: int,
    completion_index: int,
    rating: int | None,
    flagged: bool,
    version: int,
    now: datetime | None = None,
) -> bool:
    """Store one completion's rating and flag; False when the request was stale or a repeat (nothing changed)."""
    return step_rate_outcome(
        assignment=assignment,
        step_index=step_index,
        completion_index=completion_index,
        rating=rating,
        flagged=flagged,
        version=version,
        now=now,
    ).applied


def step_rate_outcome(
    *,
    assignment: Assignment,
    step_index: int,
    completion_index: int,
    rating: int | None,
    flagged: bool,
    version: int,
    now: datetime | None = None,
) -> Rated:
    """step_rate, telling the caller what changed so that it can answer with just that.

    Queries, the common case (a step rated in place or the next step rated):
    two row locks, one read of the assignment's ratings, one upsert (plus the
    new LabeledStep and the previous step's chosen_completion when a step is
    added) and one UPDATE of the assignment's time and lease.
    """
    if rating not in (None, -1, 0, 1):
        raise RatingRejected("A rating is -1, 0 or +1.")
    if not 1 <= version <= MAX_VERSION:
        raise RatingRejected("The version must be a positive integer.")
    now = now or timezone.now()
    with transaction.atomic():
        locked = _lock(assignment)
        solution = locked.task.solution
        steps: list[str] = solution.steps or []
        rows = _rows(locked)
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
            )

        # The release stores an unflagged original step as null and an
        # unflagged alternative as false; we write the same.
        stored_flag: bool | None = True if flagged else (None if completion_index == 0 else False)
        step_id = next((r.step_id for r in rows if r.index == step_index), None)
        added_step = step_id is None
        if step_id is None:
            # No get_or_create needed: the assignment row lock serialises
            # writers. Created as the last labeled step: chosen_completion null.
            step_id = LabeledStep.objects.create(assignment=locked, index=step_index).pk
        _upsert_rating(
            step_id=step_id,
            completion_index=completion_index,
            text=text,
            rating=rating,
            flagged=stored_flag,
            version=version,
            now=now,
        )
        after = [r for r in rows if not (r.index == step_index and r.completion == completion_index)]
        after.append(
            _Row(step_id, step_index, None if added_step else (existing.chosen if existing else None),
                 completion_index, rating, version, stored_flag, text)
        )  # fmt: skip

        reshaped = False
        if completion_index == 0:
            reshaped = _keep_trajectory_consistent(locked, steps=steps, rows=after, version=version)

        fields = _account_time(locked, now=now)
        locked.lease_expires_at = lease_expiry(now=now)
        locked.save(update_fields=[*fields, "lease_expires_at", "ratings_reset_version"])
    return Rated(
        applied=True,
        reshaped=reshaped,
        assignment=locked,
        ratings=None if reshaped else _page_order(after),
        stop_before=progress.stop_index,
    )


def _page_order(rows: list[_Row]) -> list[tuple[int, int, str, int | None, bool | None, int]]:
    return [(r.index, r.completion, r.text, r.rating, r.flagged, r.version) for r in sorted(
        rows, key=lambda r: (r.index, r.completion))]  # fmt: skip


def _upsert_rating(
    *, step_id: int, completion_index: int, text: str, rating: int | None, flagged: bool | None, version: int,
    now: datetime,
) -> None:  # fmt: skip
    # One statement for "create or overwrite, but only with a newer version":
    # the rule holds in the statement itself, not only under the row lock.
    table = StepRating._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (step_id, completion_index, text, rating, flagged, version, updated_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (step_id, completion_index) DO UPDATE SET rating = EXCLUDED.rating,"
            " flagged = EXCLUDED.flagged, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at"
            f" WHERE {table}.version < EXCLUDED.version",
            [step_id, completion_index, text, rating, flagged, version, now],
        )


def _keep_trajectory_consistent(assignment: Assignment, *, steps: list[str], rows: list[_Row], version: int) -> bool:
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
            step_id = next(r.step_id for r in rows if r.index == stop)
            StepRating.objects.bulk_create(
                StepRating(step_id=step_id, completion_index=a.ordinal, text=a.text, rating=None, flagged=False)
                for a in alternatives
            )
            created = True
        else:
            _alternatives_request(assignment, step_index=stop)

    # chosen_completion from what the rows say is stored (no re-read).
    stored = {r.index: r.chosen for r in rows if r.completion == 0 and r.index <= stop}
    wanted = chosen_completions(labeled_indexes=sorted(stored))
    for value in (0, None):
        changed = [i for i, c in wanted.items() if c == value and stored[i] != value]
        if changed:
            LabeledStep.objects.filter(assignment=assignment, index__in=changed).update(chosen_completion=value)
    return bool(deleted or stale_alternatives or created)


def _alternatives_request(assignment: Assignment, *, step_index: int) -> None:
    """No stored alternatives for the error step: ask the step generator for some.

    The claim is written in this transaction and the worker is queued after
    commit (activelearn.stepgen_service); alternatives_generated_attach puts
    the result in front of the labeler once it is ready.
    """
    if settings.STEPGEN_BACKEND == "none":
        return
    from activelearn.stepgen_service import candidates_prefetch  # the web process needs no stepgen otherwise

    candidates_prefetch(assignment_id=assignment.pk, step_index=step_index)


def alternatives_generated_attach(*, assignment: Assignment) -> bool:
    """Attach generated alternatives for the error step once they are ready.

    True while a worker is still generating them: the labeler waits (the
    screen polls) and submitting is refused. A failed generation does not
    block the task; it ends without alternatives, as it would with none stored.
    """
    if settings.STEPGEN_BACKEND == "none" or assignment.status != AssignmentStatus.IN_PROGRESS:
        return False
    if not StepCandidateSet.objects.filter(assignment=assignment).exists():
        return False  # the common case costs one indexed query and no lock
    with transaction.atomic():
        locked = _lock(assignment)
        steps: list[str] = locked.task.solution.steps or []
        rows = _rows(locked)
        own = {r.index: r.rating for r in rows if r.completion == 0}
        progress = progress_compute(step_count=len(steps), own_ratings=own, alternative_ratings={})
        stop = progress.stop_index
        if not progress.stopped_at_error or any(r.completion > 0 and r.index == stop for r in rows):
            return False
        candidates = StepCandidateSet.objects.filter(assignment=locked, step_index=stop).first()
        if candidates is None:
            return False
        if candidates.status == CandidateSetStatus.PENDING:
            return True
        if candidates.status != CandidateSetStatus.READY:
            return False
        solution_id = locked.task.solution_id
        texts = [t for t in candidates.texts if isinstance(t, str) and t.strip() and t != steps[stop]]
        model = str((candidates.sampling or {}).get("model", ""))[:200]
        # Stored on the solution, so later labelers who stop at the same step
        # rate the same alternatives; another labeler may have stored some
        # first, and then those are used.
        StepAlternative.objects.bulk_create(
            [
                StepAlternative(solution_id=solution_id, step_index=stop, ordinal=i, text=t, source_model=model)
                for i, t in enumerate(texts, start=1)
            ],
            ignore_conflicts=True,
        )
        step_id = next(r.step_id for r in rows if r.index == stop)
        StepRating.objects.bulk_create(
            StepRating(step_id=step_id, completion_index=a.ordinal, text=a.text, rating=None, flagged=False)
            for a in StepAlternative.objects.filter(solution_id=solution_id, step_index=stop).order_by("ordinal")
        )
    return False


def assignment_submit(*, assignment: Assignment, now: datetime | None = None) -> FinishReason:
    """Finish with the reason the ratings call for (found_error or solution)."""
    now = now or timezone.now()
    if alternatives_generated_attach(assignment=assignment):
        raise NotFinished("Other candidates for this step are still being generated; submit again in a moment.")
    with transaction.atomic():
        locked = _lock(assignment)
        if locked.task.solution.steps is None:
            # Phase 1 ends when the solution reaches a final answer (labeling.phase_one).
            raise NotFinished("Continue until the solution reaches its final answer, or give up.")
        progress = _progress(len(locked.task.solution.steps or []), _rows(locked))
        reason = progress.ready_reason
        if reason is None:
            raise NotFinished(
                "Rate every alternative of the step you marked -1 first."
                if progress.stopped_at_error
                else "Rate every step first, or stop at the first step you rate -1."
            )
        _finish(locked, reason=reason, text="", now=now)
    return reason


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
        locked = _lock(assignment)
        _finish(locked, reason=finish_reason, text=text, now=now)


def _finish(assignment: Assignment, *, reason: FinishReason, text: str, now: datetime) -> None:
    fields = _account_time(assignment, now=now)
    assignment.status = AssignmentStatus.SUBMITTED
    assignment.submitted_at = now
    assignment.finish_reason = reason
    assignment.finish_reason_text = text
    # Read-only from here on, so the export can use a frozen copy of the label.
    assignment.label_steps_json = label_steps_freeze(assignment_id=assignment.pk)
    assignment.save(
        update_fields=[*fields, "status", "submitted_at", "finish_reason", "finish_reason_text", "label_steps_json"]
    )
    task = assignment.task
    # The task row is locked (_lock), so two labelers finishing the same
    # multi-labeler task count each other's submissions correctly.
    submitted = Assignment.objects.filter(task=task, status=AssignmentStatus.SUBMITTED).count()
    if submitted >= task.labelers_needed and task.status == TaskStatus.OPEN:
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.DONE)
