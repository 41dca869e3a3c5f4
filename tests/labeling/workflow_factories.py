"""Small builders for the labeler-workflow tests (queue, rating, views, browser)."""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib.auth.models import User

from labeling.models import (
    Assignment,
    Generation,
    GenerationStatus,
    Labeler,
    LabelerStatus,
    Problem,
    Solution,
    StepAlternative,
    Task,
    content_sha256,
    text_sha256,
)

if TYPE_CHECKING:
    from _typeshed import SupportsLenAndGetItem

_n = itertools.count(1)
_T = TypeVar("_T")


class FixedDraw(random.Random):
    """The queue's QC draw, fixed: ``random()`` always returns ``value``; ``choice`` takes the first."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value

    def choice(self, seq: SupportsLenAndGetItem[_T]) -> _T:
        return seq[0]


STEPS = [
    "Let's call the numerator $x$.",
    "So the denominator is $3x-7$.",
    "We know that $\\frac{x}{3x-7} = \\frac{2}{5}$.",
    "So $5x = 2(3x-7)$, and $5x = 6x - 14$.",
    "So $x = 7$.",
]


def make_generation(*, number: int | None = None, status: str = GenerationStatus.OPEN) -> Generation:
    return Generation.objects.create(number=next(_n) + 1000 if number is None else number, status=status)


def make_task(
    *,
    generation: Generation,
    steps: list[str] | None = None,
    priority: float = 0.0,
    labelers_needed: int = 1,
    alternatives: dict[int, list[str]] | None = None,
    answer: str = "14",
) -> Task:
    n = next(_n)
    text = f"The denominator of a fraction is 7 less than 3 times the numerator ({n})."
    problem = Problem.objects.create(
        unique_id=f"test/{n}.json", problem=text, problem_sha256=text_sha256(text), answer=answer, solution="hidden ref"
    )
    steps = list(STEPS if steps is None else steps)
    solution = Solution.objects.create(
        problem=problem, steps=steps, content_sha256=content_sha256(steps, "7"), final_answer="7"
    )
    for step_index, texts in (alternatives or {}).items():
        for ordinal, alt in enumerate(texts, start=1):
            StepAlternative.objects.create(solution=solution, step_index=step_index, ordinal=ordinal, text=alt)
    return Task.objects.create(
        generation=generation, solution=solution, priority=priority, labelers_needed=labelers_needed
    )


def make_labeler(*, name: str | None = None, status: str = LabelerStatus.ACTIVE) -> Labeler:
    user = User.objects.create_user(username=name or f"labeler{next(_n)}", password="pw-for-tests-1")
    return Labeler.objects.create(user=user, status=status)


def make_assignment(task: Task, **fields: Any) -> Assignment:
    """A saved assignment of ``task``, made the one way the ORM makes them."""
    assignment = Assignment.for_task(task, **fields)
    assignment.save()
    return assignment
