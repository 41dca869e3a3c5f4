"""Builders for the quality-control tests: gold tasks, screening sets, labeling one through."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from django.test import Client

from labeling.models import Assignment, Generation, Labeler, Task
from labeling.quality.gold import gold_set, gold_steps_for_errors, quality_control_set_create, screening_set_create
from labeling.work.queue import assignment_next
from labeling.work.rating import assignment_submit, step_rate
from tests.labeling.workflow_factories import STEPS, make_task

GOLD_NOTE = "GOLDNOTE-zq7: the sign flips in step 3"


def make_gold_solution_task(*, generation: Generation, error_steps: Collection[int] = (2,)) -> Task:
    """A normal task whose solution is then made gold (STEPS; error at step index 2 by default)."""
    task = make_task(generation=generation)
    specs = gold_steps_for_errors(step_count=len(STEPS), error_steps=error_steps, note=GOLD_NOTE)
    gold_set(solution=task.solution, steps=specs)
    return task


def make_screening_set(*, size: int, error_steps: Collection[int] = (2,)) -> list[Task]:
    from labeling.quality.gold import screening_generation_get

    # Scratch tasks just to create problems/solutions; they live in generation -1 as normal tasks.
    scratch = [
        make_gold_solution_task(generation=screening_generation_get(), error_steps=error_steps) for _ in range(size)
    ]
    Task.objects.filter(pk__in=[t.pk for t in scratch]).delete()
    return screening_set_create(solutions=[t.solution for t in scratch])


def make_qc_pool(*, generation: Generation, size: int, error_steps: Collection[int] = (2,)) -> list[Task]:
    scratch = [make_gold_solution_task(generation=generation, error_steps=error_steps) for _ in range(size)]
    Task.objects.filter(pk__in=[t.pk for t in scratch]).delete()
    return quality_control_set_create(generation=generation, solutions=[t.solution for t in scratch])


def label(assignment: Assignment, ratings: Sequence[int]) -> None:
    """Rate the solution's own steps in order and submit (stops at the first -1)."""
    for index, rating in enumerate(ratings):
        step_rate(
            assignment_id=assignment.pk, user_id=None, step_index=index, completion_index=0, rating=rating,
            flagged=False, version=index + 1,
        )  # fmt: skip
        if rating == -1:
            break
    assignment_submit(assignment_id=assignment.pk, user_id=None)


AGREE = [1, 1, -1]  # first error at step index 2: agrees with the default gold
DISAGREE = [1, 1, 1, 1, 1]  # no error found


def next_for(labeler: Labeler, **kwargs: Any) -> Assignment:
    """assignment_next for a call that must hand something out."""
    assignment = assignment_next(labeler=labeler, **kwargs)
    assert assignment is not None
    return assignment


def login(labeler: Labeler) -> Client:
    client = Client()
    assert labeler.user is not None
    client.force_login(labeler.user)
    return client
