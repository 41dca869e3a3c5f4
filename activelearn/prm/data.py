"""PRM800K-shaped labeled solutions and their conversion into training examples."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from activelearn.prm.modeling import NEGATIVE, NEUTRAL, POSITIVE

NeutralHandling = Literal["positive", "negative", "own"]
VALID_RATINGS = (-1, 0, 1)


@dataclass(frozen=True)
class RatedCompletion:
    text: str
    rating: int  # -1, 0 or +1 as in PRM800K

    def __post_init__(self) -> None:
        if self.rating not in VALID_RATINGS:
            raise ValueError(f"rating must be one of {VALID_RATINGS}, got {self.rating!r}")


@dataclass(frozen=True)
class LabeledStep:
    completions: tuple[RatedCompletion, ...]
    # Index into ``completions`` of the one the solution continues with; None when the
    # labeler stopped here (every completion rated, none continued).
    chosen: int | None = None

    def __post_init__(self) -> None:
        if not self.completions:
            raise ValueError("a labeled step needs at least one rated completion")
        if self.chosen is not None and not 0 <= self.chosen < len(self.completions):
            raise ValueError(f"chosen index {self.chosen} out of range")


@dataclass(frozen=True)
class LabeledSolution:
    problem_id: str
    problem: str
    steps: tuple[LabeledStep, ...]
    # The whole solution as generated (phase 2), past the step where labeling stopped;
    # None when unknown (phase 1). Used to compare solution-level aggregations, which
    # must see whole solutions, not trajectories cut at the first error.
    solution_steps: tuple[str, ...] | None = None


def trajectory_with_first_error(solution: LabeledSolution) -> tuple[list[str], int | None]:
    """The steps a labeler walked through and the index of the first one rated -1."""
    steps: list[str] = []
    first_error: int | None = None
    for step in solution.steps:
        completion = step.completions[step.chosen if step.chosen is not None else 0]
        if completion.rating == -1 and first_error is None:
            first_error = len(steps)
        steps.append(completion.text)
        if step.chosen is None:
            break
    return steps, first_error


@dataclass(frozen=True)
class StepExample:
    """One training sequence: a problem and steps, with a class label per step or None."""

    problem_id: str
    problem: str
    steps: tuple[str, ...]
    labels: tuple[int | None, ...]


def rating_to_class(rating: int, neutral: NeutralHandling) -> int:
    if rating == 1:
        return POSITIVE
    if rating == -1:
        return NEGATIVE
    if neutral == "own":
        return NEUTRAL
    return POSITIVE if neutral == "positive" else NEGATIVE


def solution_examples(solution: LabeledSolution, neutral: NeutralHandling = "own") -> list[StepExample]:
    """Expand one labeled solution into training sequences.

    The chosen path becomes a single sequence labeled at every step (causal attention
    makes that equivalent to one example per prefix, at a fraction of the compute). Each
    non-chosen rated completion becomes its own sequence: same prefix, a different last
    step, labeled only at that last step so the shared prefix is not counted twice.
    """
    examples: list[StepExample] = []
    chain: list[str] = []
    chain_labels: list[int | None] = []
    for step in solution.steps:
        for index, completion in enumerate(step.completions):
            if index == step.chosen:
                continue
            examples.append(
                StepExample(
                    problem_id=solution.problem_id,
                    problem=solution.problem,
                    steps=(*chain, completion.text),
                    labels=(*([None] * len(chain)), rating_to_class(completion.rating, neutral)),
                )
            )
        if step.chosen is None:
            break
        chosen = step.completions[step.chosen]
        chain.append(chosen.text)
        chain_labels.append(rating_to_class(chosen.rating, neutral))
    if chain:
        examples.insert(
            0,
            StepExample(
                problem_id=solution.problem_id,
                problem=solution.problem,
                steps=tuple(chain),
                labels=tuple(chain_labels),
            ),
        )
    return examples


def build_examples(solutions: Iterable[LabeledSolution], neutral: NeutralHandling = "own") -> list[StepExample]:
    return [example for solution in solutions for example in solution_examples(solution, neutral)]


def is_validation_problem(problem_id: str, val_fraction: float, salt: str = "prm-split") -> bool:
    """Stable across runs, processes and machines (unlike ``hash()``), keyed on the problem."""
    digest = hashlib.sha256(f"{salt}:{problem_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


class _HasProblemId(Protocol):
    @property
    def problem_id(self) -> str: ...


_Item = TypeVar("_Item", bound=_HasProblemId)


def split_by_problem(
    items: Sequence[_Item], val_fraction: float = 0.1, salt: str = "prm-split"
) -> tuple[list[_Item], list[_Item]]:
    train: list[_Item] = []
    validation: list[_Item] = []
    for item in items:
        (validation if is_validation_problem(item.problem_id, val_fraction, salt) else train).append(item)
    return train, validation
