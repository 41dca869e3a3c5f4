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

Outcome labels (``OutcomeSolution``, what an ORM trains on and what a PRM may take
beside the human labels) come from graded solutions instead: whether the final answer is
right, by the automatic grader, and no human label is read (``outcome_solutions_list``).

``activelearn.prm.data`` (which loads torch through ``modeling``) is imported inside the
functions, so importing this module from the web process costs nothing.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from activelearn.grading import extract_final_answer
from activelearn.grading.equivalence import answer_groups
from activelearn.selection.solutions import solutions_matching
from labeling.data.snapshot import read_snapshot
from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    LabeledStep,
    LabelerStatus,
    Solution,
    TaskKind,
)

if TYPE_CHECKING:
    from activelearn.prm.data import LabeledSolution, NeutralHandling, OutcomeSolution

# Assignments per page; each page costs two queries (assignments, then their steps
# left-joined to ratings), so memory stays flat and there is no query per assignment.
CHUNK = 1000
# Solution ids per query when reading outcome solutions back (SQLite binds at most 32,766
# parameters per statement).
OUTCOME_PAGE = 5000

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
        return _filters_json(self.__dict__)

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> TrainingDataFilters:
        return cls(**_filters_from_json(values))


@dataclass(frozen=True)
class OutcomeDataFilters:
    """Which graded solutions become outcome labels: solutions with steps whose final
    answer the grader found right or wrong (``Solution.is_correct`` not null), of these
    problems, uniformly sampled down to ``count`` with ``seed``."""

    # Problem.split values / Problem.unique_ids (``champ/*`` is a prefix); at least one of
    # the two must be given, so that a held-out problem is never read by accident.
    splits: tuple[str, ...] | None = None
    problem_ids: tuple[str, ...] | None = None
    # Only solutions served as tasks in these generations (selection.solutions.solutions_matching).
    generations: tuple[int, ...] | None = None
    # None: every matching solution.
    count: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.splits and not self.problem_ids:
            raise OutcomeSelectionError(
                "outcome solutions need splits or problem ids to come from, so that held-out problems are never read"
            )
        if self.count is not None and (isinstance(self.count, bool) or not isinstance(self.count, int)):
            raise OutcomeSelectionError(f"the outcome solution count must be an integer, got {self.count!r}")
        if self.count is not None and self.count < 1:
            raise OutcomeSelectionError(f"the outcome solution count must be at least 1, got {self.count}")

    def to_json(self) -> dict[str, Any]:
        return _filters_json(self.__dict__)

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> OutcomeDataFilters:
        return cls(**_filters_from_json(values))


# The tuple fields of both filter kinds, stored as JSON lists (checkpoint hyperparameters).
_TUPLE_FIELDS = ("generations", "splits", "problem_ids")


def _filters_json(fields: dict[str, Any]) -> dict[str, Any]:
    values = dict(fields)
    for key in _TUPLE_FIELDS:
        values[key] = None if values[key] is None else list(values[key])
    return values


def _filters_from_json(stored: dict[str, Any]) -> dict[str, Any]:
    values = dict(stored)
    for key in _TUPLE_FIELDS:
        if values.get(key) is not None:
            values[key] = tuple(values[key])
    return values


class OutcomeSelectionError(ValueError):
    """An outcome-label selection that cannot be honoured (no problems named, a bad count)."""


@dataclass(frozen=True)
class TrainingSet:
    # Human-labeled solutions.
    train: list[LabeledSolution]
    validation: list[LabeledSolution]
    # Applied when the solutions are expanded into examples (TrainConfig.neutral).
    neutral: NeutralHandling = "own"
    filters: TrainingDataFilters = field(default_factory=TrainingDataFilters)
    validation_filters: TrainingDataFilters | None = None
    # "process" or "outcome" (an ORM: outcome solutions only, ``train`` and ``validation``
    # stay empty, no human label is read).
    objective: str = "process"
    # Answer-labeled solutions: an ORM's training and validation data, or a PRM's extra
    # training labels (then ``outcome_validation`` is empty: a PRM validates on human labels).
    outcome_train: list[OutcomeSolution] = field(default_factory=list)
    outcome_validation: list[OutcomeSolution] = field(default_factory=list)
    # A PRM's graded solutions of its validation problems: not trained or validated on,
    # only scored to choose how step scores become a solution score (prm.calibration).
    selection_pool: list[OutcomeSolution] = field(default_factory=list)

    @property
    def solutions(self) -> int:
        return len(self.train) + len(self.validation) + len(self.outcome_train) + len(self.outcome_validation)

    @property
    def train_items(self) -> list[LabeledSolution | OutcomeSolution]:
        """What ``train_prm`` trains on."""
        return [*self.train, *self.outcome_train]

    @property
    def validation_items(self) -> list[LabeledSolution | OutcomeSolution]:
        """What ``train_prm`` validates on."""
        return [*self.validation, *self.outcome_validation]


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


def outcome_solutions_list(*, filters: OutcomeDataFilters, grouped: bool = False) -> list[OutcomeSolution]:
    """Graded solutions as ``OutcomeSolution``s (correct = ``Solution.is_correct``), in id
    order: all that match, or ``filters.count`` of them drawn uniformly with ``filters.seed``.
    With ``grouped``, each carries its answer group (``vote_key``, by the grader's own
    equivalence among the solutions of its problem) for votes.

    Reads solutions and problems only, never a human label. Solutions without a verdict
    (never graded, no answer found, no reference answer) and without steps (phase-1
    placeholders) are left out.
    """
    from activelearn.prm.data import OutcomeSolution

    graded = (
        solutions_matching(
            splits=filters.splits or (), problem_ids=filters.problem_ids or (), generations=filters.generations or ()
        )
        .filter(is_correct__isnull=False)
        .exclude(steps=[])
    )
    with read_snapshot():
        ids = list(graded.order_by("id").values_list("id", flat=True))
        if filters.count is not None and filters.count < len(ids):
            ids = sorted(random.Random(filters.seed).sample(ids, filters.count))
        solutions: list[OutcomeSolution] = []
        answers: list[str] = []
        for start in range(0, len(ids), OUTCOME_PAGE):
            rows = (
                Solution.objects.filter(id__in=ids[start : start + OUTCOME_PAGE])
                .order_by("id")
                .values_list("problem__unique_id", "problem__problem", "steps", "is_correct", "final_answer")
            )
            for unique_id, problem, steps, correct, final_answer in rows:
                texts = tuple(str(step) for step in steps or ())
                solutions.append(
                    OutcomeSolution(problem_id=str(unique_id), problem=problem, steps=texts, correct=bool(correct))
                )
                found = final_answer if final_answer is not None else extract_final_answer("\n".join(texts))
                answers.append(found or "")
    return _with_answer_groups(solutions, answers) if grouped else solutions


def _with_answer_groups(solutions: Sequence[OutcomeSolution], answers: Sequence[str]) -> list[OutcomeSolution]:
    """The solutions with their ``vote_key``: the grader's answer groups, per problem."""
    by_problem: dict[str, list[int]] = {}
    for index, solution in enumerate(solutions):
        by_problem.setdefault(solution.problem_id, []).append(index)
    keys, _ = answer_groups([[(answers[i], solutions[i].correct) for i in indices] for indices in by_problem.values()])
    grouped = list(solutions)
    for indices, problem_keys in zip(by_problem.values(), keys, strict=True):
        for index, key in zip(indices, problem_keys, strict=True):
            grouped[index] = dataclasses.replace(solutions[index], vote_key=key)
    return grouped


def training_set_build(
    *,
    filters: TrainingDataFilters | None = None,
    validation_filters: TrainingDataFilters | None = None,
    neutral: NeutralHandling = "own",
    val_fraction: float = 0.1,
    split_salt: str = "prm-split",
    objective: str = "process",
    outcome_filters: OutcomeDataFilters | None = None,
    outcome_validation_filters: OutcomeDataFilters | None = None,
    selection_pool: bool = True,
) -> TrainingSet:
    """The labels to train on and to validate on.

    With ``validation_filters`` (e.g. ``splits=("validation",)``) those labels validate
    and ``filters`` picks the training labels; a problem matched by both is refused, since
    it would be validated on what it trained on. Without, all matching labels are split
    by problem: the same problem ids always land on the same side (sha256 of the id).

    ``outcome_filters`` adds graded solutions as outcome labels. For a PRM (``objective``
    "process") they join the training labels; one of a validation problem is refused (with
    ``validation_filters``) or left out (split by hash). For an ORM ("outcome") they are
    all it trains on, no human label is read, and ``outcome_validation_filters`` pick its
    validation solutions (refused when they share a problem with the training ones), or
    the hash of the problem id splits ``outcome_filters``' solutions.

    ``selection_pool=False`` leaves a PRM's selection pool empty: a run whose aggregation
    is fixed never scores it, and loading and grouping it grows with the validation pool.
    """
    from activelearn.prm.data import is_validation_problem, split_by_problem

    filters = filters or TrainingDataFilters()
    if objective == "outcome":
        if outcome_filters is None:
            raise OutcomeSelectionError("an outcome-supervised model (ORM) needs outcome solutions to train on")
        if outcome_validation_filters is None:
            outcome_train, outcome_validation = split_by_problem(
                outcome_solutions_list(filters=outcome_filters), val_fraction, split_salt
            )
        else:
            outcome_train = outcome_solutions_list(filters=outcome_filters)
            outcome_validation = outcome_solutions_list(filters=outcome_validation_filters)
            _refuse_overlap(outcome_train, outcome_validation, "outcome training and the outcome validation solutions")
        return TrainingSet(
            train=[],
            validation=[],
            neutral=neutral,
            filters=filters,
            validation_filters=validation_filters,
            objective=objective,
            outcome_train=outcome_train,
            outcome_validation=outcome_validation,
        )
    if objective != "process":
        raise ValueError(f"objective must be process or outcome, got {objective!r}")
    if outcome_validation_filters is not None:
        raise OutcomeSelectionError("a PRM validates on human labels; outcome validation solutions are for an ORM")
    if validation_filters is None:
        solutions = labeled_solutions_list(filters=filters)
        train, validation = split_by_problem(solutions, val_fraction, split_salt)
    else:
        train = labeled_solutions_list(filters=filters)
        validation = labeled_solutions_list(filters=validation_filters)
        _refuse_overlap(train, validation, "training and the validation labels")
    extra: list[OutcomeSolution] = []
    if outcome_filters is not None:
        extra = outcome_solutions_list(filters=outcome_filters)
        if validation_filters is None:
            extra = [s for s in extra if not is_validation_problem(s.problem_id, val_fraction, split_salt)]
        else:
            _refuse_overlap(extra, validation, "outcome training solutions and the validation labels")
    return TrainingSet(
        train=train,
        validation=validation,
        neutral=neutral,
        filters=filters,
        validation_filters=validation_filters,
        outcome_train=extra,
        selection_pool=(
            _selection_pool(validation, validation_filters, trained=[*train, *extra]) if selection_pool else []
        ),
    )


def _selection_pool(
    validation: Sequence[LabeledSolution],
    validation_filters: TrainingDataFilters | None,
    *,
    trained: Sequence[LabeledSolution | OutcomeSolution],
) -> list[OutcomeSolution]:
    """The graded solutions of the validation problems: the validation splits' or problems'
    when the validation labels were chosen by split or problem, else those of the problems
    the validation labels are on. A problem trained on is never in it."""
    if validation_filters is not None and (validation_filters.splits or validation_filters.problem_ids):
        filters = OutcomeDataFilters(splits=validation_filters.splits, problem_ids=validation_filters.problem_ids)
    elif validation:
        filters = OutcomeDataFilters(problem_ids=tuple(sorted({s.problem_id for s in validation})))
    else:
        return []
    seen = {s.problem_id for s in trained}
    return [s for s in outcome_solutions_list(filters=filters, grouped=True) if s.problem_id not in seen]


class OverlappingSplitsError(ValueError):
    """Training and validation selections share a problem."""


def _refuse_overlap(
    train: Sequence[LabeledSolution | OutcomeSolution],
    validation: Sequence[LabeledSolution | OutcomeSolution],
    what: str,
) -> None:
    shared = {s.problem_id for s in train} & {s.problem_id for s in validation}
    if shared:
        raise OverlappingSplitsError(
            f"{len(shared)} problem(s) are in both the {what} (e.g. {sorted(shared)[0]}); "
            "give splits that do not overlap"
        )


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
