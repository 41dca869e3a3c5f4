"""Builders for labeled data in the database (the Django-side PRM tests)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.utils import timezone

from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    Generation,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Phase,
    Problem,
    Solution,
    StepRating,
    Task,
    TaskKind,
    content_sha256,
    text_sha256,
)
from tests.labeling.workflow_factories import make_assignment

_n = itertools.count(1)
FILLER = ["we", "now", "compute", "the", "value", "then", "add", "both", "sides", "so", "it", "follows"]


@dataclass
class Step:
    """One labeled step: (text, rating) completions, the chosen index, a human step."""

    completions: Sequence[tuple[str, int | None]] = ()
    chosen: int | None = 0
    human: str | None = None


@dataclass
class Built:
    assignment: Assignment
    solution: Solution
    problem: Problem
    steps: list[Step] = field(default_factory=list)


def generation(number: int | None) -> Generation:
    if number is None:
        found, _ = Generation.objects.get_or_create(number=None, phase=Phase.ONE)
        return found
    found, _ = Generation.objects.get_or_create(number=number)
    return found


def labeler(*, status: str = LabelerStatus.ACTIVE, exclude_labels: bool = False) -> Labeler:
    return Labeler.objects.create(status=status, exclude_labels=exclude_labels)


def problem(*, answer: str | None = "7", unique_id: str | None = None) -> Problem:
    n = next(_n)
    text = f"Problem number {n}: what is the value?"
    return Problem.objects.create(
        unique_id=unique_id or f"test/{n}.json", problem=text, problem_sha256=text_sha256(text), answer=answer
    )


def solution(*, of: Problem, steps: list[str] | None, final_answer: str | None = None) -> Solution:
    return Solution.objects.create(
        problem=of,
        steps=steps,
        final_answer=final_answer,
        content_sha256=content_sha256(steps, final_answer),
        source_model=f"m{next(_n)}",
    )


def labeled(
    steps: list[Step],
    *,
    generation_number: int | None = 0,
    kind: str = TaskKind.NORMAL,
    finish_reason: str = FinishReason.FOUND_ERROR,
    by: Labeler | None = None,
    of: Problem | None = None,
) -> Built:
    """A submitted assignment whose solution's steps are each step's completion 0."""
    the_problem = of or problem()
    shown = [step.completions[0][0] if step.completions else (step.human or "") for step in steps]
    the_solution = solution(of=the_problem, steps=shown)
    task = Task.objects.create(
        generation=generation(generation_number),
        solution=the_solution,
        kind=kind,
        is_quality_control=kind == TaskKind.QUALITY_CONTROL,
    )
    assignment = make_assignment(
        task,
        labeler=by or labeler(),
        status=AssignmentStatus.SUBMITTED,
        submitted_at=timezone.now(),
        finish_reason=finish_reason,
    )
    for index, step in enumerate(steps):
        row = LabeledStep.objects.create(
            assignment=assignment, index=index, chosen_completion=step.chosen, human_completion=step.human
        )
        StepRating.objects.bulk_create(
            StepRating(step=row, completion_index=c, text=text, rating=rating)
            for c, (text, rating) in enumerate(step.completions)
        )
    return Built(assignment=assignment, solution=the_solution, problem=the_problem, steps=steps)


def keyword_labels(count: int, *, seed: int, steps: int = 3, generation_number: int | None = 0) -> list[Built]:
    """Solutions whose steps end in "correct" (+1) or "wrong" (-1): learnable by a tiny model."""
    rng = random.Random(seed)
    built = []
    for _ in range(count):
        rows = []
        for _ in range(steps):
            good = rng.random() < 0.6
            words = [*rng.sample(FILLER, 3), "correct" if good else "wrong"]
            rows.append(Step(completions=[(" ".join(words), 1 if good else -1)], chosen=0))
        built.append(labeled(rows, generation_number=generation_number, finish_reason=FinishReason.SOLUTION))
    return built


TINY_CONFIG = {
    "learning_rate": 1e-2,
    "num_epochs": 2,
    "batch_size": 8,
    "max_length": 64,
    "max_problem_tokens": 16,
    "warmup_ratio": 0.0,
    "checkpoint_every": 0,
    "val_fraction": 0.3,
    "seed": 1,
}
