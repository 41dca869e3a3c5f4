"""Selectors: stored labels → ``activelearn.prm`` training data.

Every submitted assignment becomes one ``LabeledSolution``: its labeled steps in order,
each with the completions the labeler rated (completion 0 is the step as shown; the
others are alternatives rated at the error step in phase 2, or the candidates of a
phase-1 step) and ``chosen`` = the completion the solution continued with.

Conversion rules (the PRM800K release follows the same ones):

* A rating that is null (not given) is skipped; ``chosen`` is re-indexed to the kept
  completions. If the chosen completion itself is unrated, the trajectory stops there:
  later steps were labeled in a context the model cannot be told about.
* Phase 1: when no candidate was acceptable the labeler wrote their own step
  (``human_completion``, with ``chosen_completion`` null). That text is appended as a
  positive completion and becomes the chosen one: a labeler does not write a step they
  would rate as wrong, and the solution continued from it.
* A step with neither a chosen completion nor a human one ends the trajectory (the
  labeler stopped there, usually at the first error).

``activelearn.prm.data`` (which loads torch through ``modeling``) is imported inside the
functions, so importing this module from the web process costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from labeling.data.snapshot import read_snapshot
from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    LabeledStep,
    LabelerStatus,
    TaskKind,
)

if TYPE_CHECKING:
    from activelearn.prm.data import LabeledSolution, NeutralHandling

# Assignments per page; each page costs two queries (assignments, then their steps
# left-joined to ratings), so memory stays flat and there is no query per assignment.
CHUNK = 1000

FINISHED_REASONS = (FinishReason.FOUND_ERROR, FinishReason.SOLUTION)


@dataclass(frozen=True)
class TrainingDataFilters:
    """Which submitted labels count. The defaults follow the PRM800K paper."""

    # Newest generation number included; phase-1 work (number null) is always in.
    # None: every generation.
    through_generation: int | None = None
    # Only these generations (phase 1 is None in the tuple); overrides through_generation.
    generations: tuple[int | None, ...] | None = None
    include_quality_control: bool = False
    include_screening: bool = False
    # bad_problem / give_up: the labeler could not finish, so the labels are partial.
    include_unfinished: bool = False
    include_excluded_labelers: bool = False
    include_suspended_labelers: bool = False
    # Only problems of these splits (Problem.split; labeling.data.problem_splits) / these
    # Problem.unique_ids; None: any.
    splits: tuple[str, ...] | None = None
    problem_ids: tuple[str, ...] | None = None

    def as_q(self) -> Q:
        q = Q(status=AssignmentStatus.SUBMITTED)
        if self.splits is not None:
            q &= Q(task__solution__problem__split__in=self.splits)
        if self.problem_ids is not None:
            q &= Q(task__solution__problem__unique_id__in=self.problem_ids)
        if self.generations is not None:
            numbers = [n for n in self.generations if n is not None]
            by_generation = Q(task__generation__number__in=numbers)
            if None in self.generations:
                by_generation |= Q(task__generation__number__isnull=True)
            q &= by_generation
        elif self.through_generation is not None:
            q &= Q(task__generation__number__lte=self.through_generation) | Q(task__generation__number__isnull=True)
        if not self.include_quality_control:
            q &= Q(task__is_quality_control=False) & ~Q(task__kind=TaskKind.QUALITY_CONTROL)
        if not self.include_screening:
            q &= ~Q(task__kind=TaskKind.SCREENING)
        if not self.include_unfinished:
            q &= Q(finish_reason__in=FINISHED_REASONS)
        if not self.include_excluded_labelers:
            q &= Q(labeler__exclude_labels=False)
        if not self.include_suspended_labelers:
            q &= ~Q(labeler__status=LabelerStatus.SUSPENDED)
        return q

    def to_json(self) -> dict[str, Any]:
        values = dict(self.__dict__)
        for key in ("generations", "splits", "problem_ids"):
            values[key] = None if values[key] is None else list(values[key])
        return values

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> TrainingDataFilters:
        values = dict(values)
        for key in ("generations", "splits", "problem_ids"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        return cls(**values)


@dataclass(frozen=True)
class TrainingSet:
    train: list[LabeledSolution]
    validation: list[LabeledSolution]
    # Applied when the solutions are expanded into examples (TrainConfig.neutral).
    neutral: NeutralHandling = "own"
    filters: TrainingDataFilters = field(default_factory=TrainingDataFilters)
    validation_filters: TrainingDataFilters | None = None

    @property
    def solutions(self) -> int:
        return len(self.train) + len(self.validation)


def labeled_solutions_iter(*, filters: TrainingDataFilters | None = None) -> Iterator[LabeledSolution]:
    """Labeled solutions in assignment order, read in pages of ``CHUNK`` assignments.

    Call inside ``labeling.data.snapshot.read_snapshot()`` for one consistent view across pages.
    """
    from activelearn.prm.data import LabeledSolution

    selected = Assignment.objects.filter((filters or TrainingDataFilters()).as_q())
    last_id = 0
    while True:
        page = list(
            selected.filter(id__gt=last_id)
            .order_by("id")
            .values_list(
                "id", "task__solution__problem__unique_id", "task__solution__problem__problem", "task__solution__steps"
            )[:CHUNK]
        )
        if not page:
            return
        last_id = page[-1][0]
        steps = _steps_by_assignment([row[0] for row in page])
        for assignment_id, unique_id, problem_text, shown in page:
            labeled = steps.get(assignment_id, ())
            if labeled:
                yield LabeledSolution(
                    problem_id=str(unique_id),
                    problem=problem_text,
                    steps=tuple(labeled),
                    # The whole solution as generated (null for phase 1's placeholder).
                    solution_steps=tuple(str(step) for step in shown) if shown else None,
                )
        if len(page) < CHUNK:
            return


def labeled_solutions_list(*, filters: TrainingDataFilters | None = None) -> list[LabeledSolution]:
    with read_snapshot():
        return list(labeled_solutions_iter(filters=filters))


def training_set_build(
    *,
    filters: TrainingDataFilters | None = None,
    validation_filters: TrainingDataFilters | None = None,
    neutral: NeutralHandling = "own",
    val_fraction: float = 0.1,
    split_salt: str = "prm-split",
) -> TrainingSet:
    """The labels to train on and to validate on.

    With ``validation_filters`` (e.g. ``splits=("validation",)``) those labels validate
    and ``filters`` picks the training labels; a problem matched by both is refused, since
    it would be validated on what it trained on. Without, all matching labels are split
    by problem: the same problem ids always land on the same side (sha256 of the id).
    """
    from activelearn.prm.data import split_by_problem

    filters = filters or TrainingDataFilters()
    if validation_filters is None:
        solutions = labeled_solutions_list(filters=filters)
        train, validation = split_by_problem(solutions, val_fraction, split_salt)
    else:
        train = labeled_solutions_list(filters=filters)
        validation = labeled_solutions_list(filters=validation_filters)
        shared = {s.problem_id for s in train} & {s.problem_id for s in validation}
        if shared:
            raise OverlappingSplitsError(
                f"{len(shared)} problem(s) are in both the training and the validation labels "
                f"(e.g. {sorted(shared)[0]}); give splits that do not overlap"
            )
    return TrainingSet(
        train=train, validation=validation, neutral=neutral, filters=filters, validation_filters=validation_filters
    )


class OverlappingSplitsError(ValueError):
    """Training and validation selections share a problem."""


def _steps_by_assignment(assignment_ids: Sequence[int]) -> dict[int, list[Any]]:
    from activelearn.prm.data import LabeledStep as PRMStep
    from activelearn.prm.data import RatedCompletion

    # values_list across the reverse FK is a LEFT JOIN: a step with only a human
    # completion (no rated candidates) still comes back, with null rating columns.
    rows = (
        LabeledStep.objects.filter(assignment_id__in=assignment_ids)
        .order_by("assignment_id", "index", "ratings__completion_index")
        .values_list(
            "assignment_id",
            "index",
            "chosen_completion",
            "human_completion",
            "ratings__completion_index",
            "ratings__text",
            "ratings__rating",
        )
    )
    grouped: dict[tuple[int, int], tuple[int | None, str | None, list[tuple[int, str, int]]]] = {}
    for assignment_id, index, chosen, human, completion_index, text, rating in rows:
        entry = grouped.setdefault((assignment_id, index), (chosen, human, []))
        if completion_index is not None and rating is not None:
            entry[2].append((completion_index, text, rating))

    result: dict[int, list[Any]] = {}
    stopped: set[int] = set()
    for (assignment_id, _index), (chosen, human, rated) in grouped.items():  # ordered by (assignment, index)
        if assignment_id in stopped:
            continue
        completions = [RatedCompletion(text, rating) for _, text, rating in rated]
        positions = {completion_index: position for position, (completion_index, _, _) in enumerate(rated)}
        chosen_position: int | None
        if chosen is not None:
            chosen_position = positions.get(chosen)
        elif human is not None:
            completions.append(RatedCompletion(human, 1))
            chosen_position = len(completions) - 1
        else:
            chosen_position = None
        if completions:
            result.setdefault(assignment_id, []).append(PRMStep(completions=tuple(completions), chosen=chosen_position))
        if chosen_position is None:
            stopped.add(assignment_id)
    return result
