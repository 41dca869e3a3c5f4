"""PRM800K-shaped labeled solutions and their conversion into training examples."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeVar

from activelearn.prm.modeling import NEGATIVE, NEUTRAL, POSITIVE

NeutralHandling = Literal["positive", "negative", "own"]
# What a PRM is trained to predict: "process", the human rating of each step; "outcome"
# (an ORM, Lightman et al. 2023, section 2.5), whether the solution's final answer is
# right, read at its final step.
Objective = Literal["process", "outcome"]
OBJECTIVES: tuple[Objective, ...] = ("process", "outcome")
# Which steps of an outcome-labeled solution a process run labels: "final", only the last
# one; "every_step", all of them with the answer's verdict (the ORM-as-PRM weak target).
OutcomeTargets = Literal["final", "every_step"]
OUTCOME_TARGETS: tuple[OutcomeTargets, ...] = ("final", "every_step")
LabelSource = Literal["human", "outcome"]
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


@dataclass(frozen=True)
class OutcomeSolution:
    """A solution labeled only by whether its final answer is right (the automatic
    grader's verdict), with no human step label.

    ``weight`` scales the loss of its label(s). Two copies of one solution, correct with
    weight p and wrong with weight 1 - p, train on the soft target p: the loss is a
    weighted mean, so their two terms add up to the soft-target cross-entropy.
    """

    problem_id: str
    problem: str
    steps: tuple[str, ...]
    correct: bool
    weight: float = 1.0
    # The answer group for votes (``grading.equivalence``: answers the grader takes for
    # equal share one); None where not known. Only choosing the aggregation reads it.
    vote_key: str | None = None

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError(f"outcome solution of problem {self.problem_id!r} has no steps")
        if not isinstance(self.correct, bool):
            raise ValueError(f"outcome solution of problem {self.problem_id!r}: correct must be a bool")
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"outcome solution of problem {self.problem_id!r}: weight must be >= 0, got {self.weight}")


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
    """One training sequence: a problem and steps, with a class label per step or None.

    ``weights``: the loss weight of each step's label (None: 1 for every label). A human
    step label weighs 1; an outcome label weighs ``TrainConfig.outcome_weight`` times its
    solution's weight. ``source``: who gave the labels, a labeler ("human") or the answer
    grader ("outcome").
    """

    problem_id: str
    problem: str
    steps: tuple[str, ...]
    labels: tuple[int | None, ...]
    weights: tuple[float, ...] | None = None
    source: LabelSource = "human"

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.steps):
            raise ValueError(f"{len(self.labels)} labels for {len(self.steps)} steps (problem {self.problem_id!r})")
        if self.weights is not None and len(self.weights) != len(self.steps):
            raise ValueError(f"{len(self.weights)} weights for {len(self.steps)} steps (problem {self.problem_id!r})")

    def label_weight(self, step: int) -> float:
        return 1.0 if self.weights is None else self.weights[step]


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


def outcome_example(solution: OutcomeSolution, targets: OutcomeTargets = "final", weight: float = 1.0) -> StepExample:
    """One sequence: the whole solution, labeled positive if its answer is right and
    negative if wrong, at its final step ("final", what an ORM is trained on) or at every
    step ("every_step"), each label weighing ``weight`` x the solution's weight."""
    if targets not in OUTCOME_TARGETS:
        raise ValueError(f"outcome targets must be one of {list(OUTCOME_TARGETS)}, got {targets!r}")
    verdict = POSITIVE if solution.correct else NEGATIVE
    count = len(solution.steps)
    labeled = range(count) if targets == "every_step" else (count - 1,)
    return StepExample(
        problem_id=solution.problem_id,
        problem=solution.problem,
        steps=solution.steps,
        labels=tuple(verdict if index in labeled else None for index in range(count)),
        weights=(solution.weight * weight,) * count,
        source="outcome",
    )


TrainingItem = LabeledSolution | OutcomeSolution | StepExample


def training_examples(
    items: Iterable[TrainingItem],
    *,
    objective: Objective = "process",
    neutral: NeutralHandling = "own",
    outcome_weight: float = 1.0,
    outcome_targets: OutcomeTargets = "final",
) -> list[StepExample]:
    """Every item's sequences, in order, with labels of weight 0 removed.

    A label that weighs nothing is no label: dropping it (and a sequence left with none)
    makes a run with ``outcome_weight=0`` the very run without the outcome solutions.

    ``objective="outcome"`` (an ORM) takes only outcome solutions, each labeled at its
    final step; human step labels would make it a PRM, so they are refused.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}")
    examples: list[StepExample] = []
    for index, item in enumerate(items):
        if objective == "outcome":
            if not isinstance(item, OutcomeSolution):
                raise ValueError(
                    f"an outcome-supervised run (objective='outcome') trains on OutcomeSolution items only; "
                    f"item {index} is a {type(item).__name__} (problem {item.problem_id!r})"
                )
            examples.append(outcome_example(item, "final"))
        elif isinstance(item, OutcomeSolution):
            examples.append(outcome_example(item, outcome_targets, outcome_weight))
        elif isinstance(item, LabeledSolution):
            examples.extend(solution_examples(item, neutral))
        else:
            examples.append(item)
    return [kept for example in examples if (kept := _without_weightless_labels(example)) is not None]


def _without_weightless_labels(example: StepExample) -> StepExample | None:
    if example.weights is None:
        return example if any(label is not None for label in example.labels) else None
    labels = tuple(label if weight > 0 else None for label, weight in zip(example.labels, example.weights, strict=True))
    if all(label is None for label in labels):
        return None
    return replace(example, labels=labels)


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
