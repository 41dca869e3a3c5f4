"""Alternatives of the error step (phase 2): asked of the step generator when none are stored, attached when ready.

When a labeler rates a solution's own step -1 and the solution has no stored
alternatives for that step, the rating service asks the step generator for
some (labeling.work.candidates). Once the worker stored them, they become the
solution's alternatives and rating rows of the assignment, so the labeler rates
them before finishing; later labelers who stop at the same step rate the same
ones.
"""

from __future__ import annotations

from enum import StrEnum

from django.conf import settings
from django.db import transaction

from labeling.models import (
    Assignment,
    AssignmentStatus,
    CandidateSetStatus,
    StepAlternative,
    StepCandidateSet,
    StepRating,
)
from labeling.work.assignment import assignment_lock
from labeling.work.hotpath import RatingRow, labeled_step_id, rating_rows
from labeling.work.progress import progress_compute


class Attach(StrEnum):
    """What attaching found: nothing to attach, generation still pending, or alternatives attached."""

    NOTHING = "nothing"
    PENDING = "pending"
    ATTACHED = "attached"


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
        locked = assignment_lock(assignment)
        return (
            alternatives_attach_locked(locked, locked.task.solution.steps or [], rating_rows(locked)) == Attach.PENDING
        )


def alternatives_attach_locked(locked: Assignment, steps: list[str], rows: list[RatingRow]) -> Attach:
    """alternatives_generated_attach under the caller's lock, on the rows it read."""
    if settings.STEPGEN_BACKEND == "none":
        return Attach.NOTHING
    own = {r.index: r.rating for r in rows if r.completion == 0}
    progress = progress_compute(step_count=len(steps), own_ratings=own, alternative_ratings={})
    stop = progress.stop_index
    if not progress.stopped_at_error or any(r.completion > 0 and r.index == stop for r in rows):
        return Attach.NOTHING
    candidates = StepCandidateSet.objects.filter(assignment=locked, step_index=stop).first()
    if candidates is None:
        return Attach.NOTHING
    if candidates.status == CandidateSetStatus.PENDING:
        return Attach.PENDING
    if candidates.status != CandidateSetStatus.READY:
        return Attach.NOTHING
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
    step_id = labeled_step_id(assignment_id=locked.pk, index=stop, rows=rows)
    StepRating.objects.bulk_create(
        StepRating(step_id=step_id, completion_index=a.ordinal, text=a.text, rating=None, flagged=False)
        for a in StepAlternative.objects.filter(solution_id=solution_id, step_index=stop).order_by("ordinal")
    )
    # New rows on the page: a key press aimed at the state before them is refused.
    locked.version += 1
    Assignment.objects.filter(pk=locked.pk).update(version=locked.version)
    return Attach.ATTACHED
