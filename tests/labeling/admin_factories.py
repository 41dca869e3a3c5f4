"""Builders for the admin, API, dashboard and stepwise-export tests: submitted work written directly."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    Generation,
    LabeledStep,
    Labeler,
    StepRating,
    Task,
)
from tests.labeling.workflow_factories import make_assignment, make_generation, make_labeler, make_task


def make_staff(*, name: str = "research") -> User:
    return User.objects.create_user(username=name, password="pw-for-tests-1", is_staff=True, is_superuser=True)


def make_submitted(
    *,
    task: Task,
    labeler: Labeler,
    ratings: list[int | None],
    finish_reason: str = FinishReason.SOLUTION,
    total_time_ms: int = 60_000,
    flagged_steps: frozenset[int] = frozenset(),
    alternatives_at_last: list[tuple[str, int]] | None = None,
) -> Assignment:
    """A submitted assignment whose own steps got ``ratings`` (the last one is where labeling stopped)."""
    now = timezone.now()
    assignment = make_assignment(
        task,
        labeler=labeler,
        status=AssignmentStatus.SUBMITTED,
        started_at=now - timedelta(milliseconds=total_time_ms),
        submitted_at=now,
        total_time_ms=total_time_ms,
        finish_reason=finish_reason,
    )
    steps = task.solution.steps or []
    for i, rating in enumerate(ratings):
        last = i == len(ratings) - 1
        step = LabeledStep.objects.create(assignment=assignment, index=i, chosen_completion=None if last else 0)
        StepRating.objects.create(
            step=step,
            completion_index=0,
            text=steps[i],
            rating=rating,
            flagged=True if i in flagged_steps else None,
            version=i + 1,
            updated_at=now,
        )
        if last:
            for ordinal, (text, alt_rating) in enumerate(alternatives_at_last or [], start=1):
                StepRating.objects.create(
                    step=step, completion_index=ordinal, text=text, rating=alt_rating, flagged=False, updated_at=now
                )
    return assignment


def make_labeled_generation(*, solutions: int = 3, generation: Generation | None = None) -> list[Assignment]:
    generation = generation or make_generation(number=0)
    labeler = make_labeler()
    return [
        make_submitted(task=make_task(generation=generation), labeler=labeler, ratings=[1, 0, 1, 1, 1])
        for _ in range(solutions)
    ]
