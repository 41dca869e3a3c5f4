"""Gold labels: which ratings of each step of a solution are acceptable.

A solution *is gold* exactly when it has GoldStep rows; there is no separate
flag (the ``gold_step_unique`` index on (solution, step_index) answers "is
this solution gold" by its prefix). ``gold_set`` always writes one row per
step, so a gold solution with no error anywhere still has rows.

Screening and QC tasks are made only from gold solutions
(``screening_set_create``, ``quality_control_set_create``); the queue serves
a screening or QC task only while its solution is gold.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q

from labeling.data.imports import ImportResult, Progress
from labeling.data.prm800k import Record, RecordError, iter_records
from labeling.models import (
    SCREENING_GENERATION,
    Assignment,
    Generation,
    GenerationStatus,
    GoldStep,
    Labeler,
    Phase,
    Problem,
    SelectionReason,
    Solution,
    Task,
    TaskKind,
    TaskStatus,
    content_sha256,
    text_sha256,
)


class GoldError(ValueError):
    """A gold specification that cannot be stored (bad step index, no steps, not gold)."""


@dataclass(frozen=True)
class GoldStepSpec:
    step_index: int
    negative_ok: bool = False
    neutral_ok: bool = True
    positive_ok: bool = True
    note: str = ""


def gold_steps_for_errors(*, step_count: int, error_steps: Collection[int], note: str = "") -> list[GoldStepSpec]:
    """The usual gold: these steps are acceptable first errors, no other step may be negative.

    Every step before the last acceptable error may be passed (so finding a
    later acceptable error also agrees); the last one must be marked
    negative. No error steps = the solution has no error anywhere.
    """
    bad = sorted(set(error_steps))
    if any(i < 0 or i >= step_count for i in bad):
        raise GoldError(f"error steps {bad} outside the solution's {step_count} steps")
    last = bad[-1] if bad else None
    return [
        GoldStepSpec(
            step_index=i,
            negative_ok=i in bad,
            neutral_ok=i != last,
            positive_ok=i != last,
            note=note if i == last or (last is None and i == step_count - 1) else "",
        )
        for i in range(step_count)
    ]


def gold_set(*, solution: Solution, steps: Sequence[GoldStepSpec]) -> list[GoldStep]:
    """Make ``solution`` gold (replacing any gold it had); steps not given get the default row.

    The default row is "may be passed, is not an error" (neutral_ok and
    positive_ok). For the common case build ``steps`` with
    ``gold_steps_for_errors``.
    """
    count = solution.step_count
    if count == 0:
        raise GoldError(f"solution {solution.pk} has no steps and cannot be gold")
    given = {s.step_index: s for s in steps}
    if len(given) != len(steps):
        raise GoldError("a step index is given twice")
    outside = sorted(i for i in given if i < 0 or i >= count)
    if outside:
        raise GoldError(f"step {outside[0]} is outside the solution's {count} steps")
    if any(not (s.negative_ok or s.neutral_ok or s.positive_ok) for s in steps):
        raise GoldError("every step must allow some rating")
    rows = [
        GoldStep(
            solution=solution,
            step_index=i,
            negative_ok=given[i].negative_ok if i in given else False,
            neutral_ok=given[i].neutral_ok if i in given else True,
            positive_ok=given[i].positive_ok if i in given else True,
            note=given[i].note if i in given else "",
        )
        for i in range(count)
    ]
    with transaction.atomic():
        GoldStep.objects.filter(solution=solution).delete()
        created = GoldStep.objects.bulk_create(rows)
        # Everyone who had this solution has their rolling QC window judged
        # again, by this gold, at their next hand-out (Labeler.qc_window_passed).
        # After the gold rows: a hand-out holding a labeler's lock has read
        # the old gold and commits its verdict first; this then empties it.
        Labeler.objects.filter(pk__in=Assignment.objects.filter(task__solution=solution).values("labeler_id")).exclude(
            qc_window_passed=""
        ).update(qc_window_passed="")
        return created


def gold_from_first_errors(*, items: Sequence[tuple[int, int | None]], note: str = "") -> tuple[list[Solution], int]:
    """Make solutions gold from a first-wrong-step label each; (the solutions in order, how many became gold).

    ``items`` are (solution id, index of the first wrong step or None for no mistake).
    A solution that is gold already keeps its gold, so a second call changes nothing.
    """
    ids = [solution_id for solution_id, _ in items]
    solutions = Solution.objects.in_bulk(ids)
    missing = [solution_id for solution_id in ids if solution_id not in solutions]
    if missing:
        raise GoldError(f"solutions {missing} do not exist")
    already = set(GoldStep.objects.filter(solution_id__in=ids).values_list("solution_id", flat=True))
    created = 0
    with transaction.atomic():
        for solution_id, first_wrong in items:
            if solution_id in already:
                continue
            solution = solutions[solution_id]
            errors = [] if first_wrong is None else [first_wrong]
            gold_set(
                solution=solution,
                steps=gold_steps_for_errors(step_count=solution.step_count, error_steps=errors, note=note),
            )
            already.add(solution_id)
            created += 1
    return [solutions[solution_id] for solution_id in ids], created


def solution_is_gold(*, solution: Solution) -> bool:
    return GoldStep.objects.filter(solution=solution).exists()


# --- Screening and QC sets ---------------------------------------------------


def screening_generation_get() -> Generation:
    """Generation -1, which holds the screening set (created on first use)."""
    generation, _ = Generation.objects.get_or_create(
        number=SCREENING_GENERATION, defaults={"phase": Phase.TWO, "status": GenerationStatus.OPEN}
    )
    return generation


def screening_set_create(*, solutions: Iterable[Solution]) -> list[Task]:
    """Add gold solutions to the screening set (generation -1), in the order given.

    Tasks already in the set are kept, not duplicated. The set served is the
    first ``SCREENING_SET_SIZE`` open screening tasks in queue order
    (priority, then id), so earlier solutions come first.
    """
    return _gold_tasks_create(generation=screening_generation_get(), solutions=list(solutions), kind=TaskKind.SCREENING)


def quality_control_set_create(*, generation: Generation, solutions: Iterable[Solution]) -> list[Task]:
    """Add gold solutions to a generation's QC pool (at most ``QC_ITEMS_MAX`` in all)."""
    if generation.number is None or generation.number == SCREENING_GENERATION:
        raise GoldError("QC items belong to a numbered phase-2 generation")
    wanted = list(solutions)
    with transaction.atomic():
        have = (
            Task.objects.filter(generation=generation, kind=TaskKind.QUALITY_CONTROL)
            .exclude(solution__in=wanted)
            .count()
        )
        if have + len(wanted) > settings.QC_ITEMS_MAX:
            raise GoldError(
                f"{generation} would have {have + len(wanted)} QC items; QC_ITEMS_MAX is {settings.QC_ITEMS_MAX}"
            )
        return _gold_tasks_create(generation=generation, solutions=wanted, kind=TaskKind.QUALITY_CONTROL)


def _gold_tasks_create(*, generation: Generation, solutions: list[Solution], kind: TaskKind) -> list[Task]:
    with transaction.atomic():
        gold = set(GoldStep.objects.filter(solution__in=solutions).values_list("solution_id", flat=True).distinct())
        missing = [s.pk for s in solutions if s.pk not in gold]
        if missing:
            raise GoldError(f"solutions {missing} are not gold (set gold first)")
        tasks = []
        # Earlier solutions first: the queue orders by -priority, then id.
        for position, solution in enumerate(solutions):
            task, _ = Task.objects.get_or_create(
                generation=generation,
                solution=solution,
                kind=kind,
                serial=0,
                defaults={
                    "is_quality_control": kind == TaskKind.QUALITY_CONTROL,
                    "priority": -float(position) if kind == TaskKind.SCREENING else 0.0,
                    "status": TaskStatus.OPEN,
                    "selection_reason": SelectionReason.SCREENING
                    if kind == TaskKind.SCREENING
                    else SelectionReason.QUALITY_CONTROL,
                },
            )
            tasks.append(task)
        return tasks


# --- Import from PRM800K records ----------------------------------------------


@dataclass(frozen=True)
class _GoldRecord:
    source: str
    line: int
    solution_ids: list[int]
    step_count: int
    error_step: int | None


def gold_import(
    *, paths: Sequence[Path], dry_run: bool = False, progress: Progress | None = None
) -> tuple[ImportResult, list[int]]:
    """Turn labeled PRM800K records into gold; (result, gold solution ids in file order).

    The labeled first -1 step is an acceptable first error and the steps
    before it must not be negative; a record finished as ``solution`` means
    no error anywhere. Several records for one solution: their error steps are
    all acceptable; a record with an error and one without conflict. The
    solutions must already be in the database (import_prm800k or
    import_solutions). All-or-nothing: every line is checked before the first
    write; errors name the file, line and field.
    """
    result = ImportResult(dry_run=dry_run)
    parsed: list[_GoldRecord] = []
    for path in paths:
        for line, record in iter_records(path):
            parsed.append(_gold_record(record, source=str(path), line=line))
            result.read += 1
            if progress is not None:
                progress(1)
    errors: dict[int, set[int]] = {}
    seen_line: dict[int, tuple[str, int, bool]] = {}
    order: list[int] = []
    for item in parsed:
        path_name = item.source
        for solution_id in item.solution_ids:
            found = item.error_step is not None
            if solution_id in seen_line and seen_line[solution_id][2] != found:
                first_source, first_line, _ = seen_line[solution_id]
                raise RecordError(
                    source=path_name,
                    line=item.line,
                    field="label.finish_reason",
                    message=f"conflicts with {first_source}:{first_line} about whether the solution has an error",
                )
            if solution_id not in seen_line:
                seen_line[solution_id] = (path_name, item.line, found)
                order.append(solution_id)
            errors.setdefault(solution_id, set())
            if item.error_step is not None:
                errors[solution_id].add(item.error_step)
    if dry_run:
        result.created["gold solutions"] = len(order)
        return result, order
    with transaction.atomic():
        solutions = Solution.objects.in_bulk(order)
        for solution_id in order:
            solution = solutions[solution_id]
            gold_set(
                solution=solution,
                steps=gold_steps_for_errors(step_count=solution.step_count, error_steps=errors[solution_id]),
            )
        result.created["gold solutions"] = len(order)
    return result, order


def _gold_record(record: Record, *, source: str, line: int) -> _GoldRecord:
    def fail(field: str, message: str) -> RecordError:
        return RecordError(source=source, line=line, field=field, message=message)

    steps = record.pre_generated_steps
    if steps is None or not steps:
        raise fail("question.pre_generated_steps", "gold needs a pre-generated solution (phase-2 record)")
    if record.finish_reason not in ("found_error", "solution"):
        raise fail("label.finish_reason", f"must be found_error or solution for gold, got {record.finish_reason}")
    error_step: int | None = None
    for index, step in enumerate(record.steps):
        if index >= len(steps):
            raise fail(f"label.steps[{index}]", "more labeled steps than pre-generated steps")
        own = step.completions[0] if step.completions else None
        if own is None or own.text != steps[index]:
            raise fail(f"label.steps[{index}].completions[0].text", "is not the solution's own step")
        if own.rating == -1:
            error_step = index
            break
        if own.rating is None:
            raise fail(f"label.steps[{index}].completions[0].rating", "unrated step before the end of the label")
        if step.chosen_completion not in (0, None):
            raise fail(f"label.steps[{index}].chosen_completion", "gold must follow the solution's own steps")
    if record.finish_reason == "found_error" and error_step is None:
        raise fail("label.steps", "finish_reason is found_error but no step is rated -1")
    if record.finish_reason == "solution" and (error_step is not None or len(record.steps) != len(steps)):
        raise fail("label.steps", "finish_reason is solution but not every step is rated 0 or 1")
    problem_ids = list(
        Problem.objects.filter(problem_sha256=text_sha256(record.problem), problem=record.problem).values_list(
            "pk", flat=True
        )
    )
    solution_ids = list(
        Solution.objects.filter(
            problem_id__in=problem_ids,
            content_sha256=content_sha256(list(steps), record.pre_generated_answer),
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if not solution_ids:
        raise fail(
            "question.pre_generated_steps",
            "no solution with these steps and answer is in the database; import it first "
            "(import_prm800k or import_solutions)",
        )
    return _GoldRecord(
        source=source, line=line, solution_ids=solution_ids, step_count=len(steps), error_step=error_step
    )


def quality_control_top_up(*, generation: Generation, count: int) -> int:
    """Top the generation's QC pool up to ``count`` gold items.

    Least-used gold first, so successive generations rotate through the gold set.
    Returns the size of the QC pool; fewer than ``count`` when there is not enough gold.
    """
    if count <= 0:
        return 0
    have = set(
        Task.objects.filter(generation=generation, kind=TaskKind.QUALITY_CONTROL).values_list("solution_id", flat=True)
    )
    wanted = max(0, count - len(have))
    gold = list(
        Solution.objects.filter(Exists(GoldStep.objects.filter(solution_id=OuterRef("pk"))))
        .exclude(pk__in=have)
        .annotate(uses=Count("tasks", filter=Q(tasks__kind=TaskKind.QUALITY_CONTROL)))
        .order_by("uses", "pk")[:wanted]
    )
    if gold:
        quality_control_set_create(generation=generation, solutions=gold)
    return len(have) + len(gold)
