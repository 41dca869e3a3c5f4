"""Importing problems, solution pools and PRM800K records.

Every import is all-or-nothing: files are validated completely before the
first write, and the writes run in one transaction, so a bad line anywhere
leaves the database as it was. Errors name the file, the line and the field.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import orjson
from django.db import transaction

from labeling.data.bulkload import insert_rows
from labeling.data.prm800k import Record, RecordError, iter_json_objects, iter_records, record_to_dict
from labeling.models import (
    Assignment,
    AssignmentStatus,
    Generation,
    GenerationStatus,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Phase,
    Problem,
    Solution,
    Split,
    StepAlternative,
    StepRating,
    Task,
    TaskKind,
    TaskStatus,
    content_sha256,
    text_sha256,
)

Progress = Callable[[int], object]

WRITE_BATCH = 2000


@dataclass
class ImportResult:
    read: int = 0
    created: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    skipped: int = 0
    dry_run: bool = False

    def summary(self) -> str:
        made = ", ".join(f"{count} {name}" for name, count in sorted(self.created.items()) if count) or "nothing"
        verb = "would create" if self.dry_run else "created"
        skipped = f"; {self.skipped} already present" if self.skipped else ""
        return f"read {self.read} record(s); {verb} {made}{skipped}"


def _tick(progress: Progress | None) -> None:
    if progress is not None:
        progress(1)


# --- MATH-style problems ---------------------------------------------------

_LEVEL = re.compile(r"^(?:Level\s*)?(\d+)$")


@dataclass(frozen=True)
class ProblemRow:
    unique_id: str
    problem: str
    solution: str | None
    answer: str | None
    subject: str
    level: int | None
    split: str


def _require_str(obj: dict[str, Any], key: str, source: str, line: int, *, nullable: bool = False) -> str | None:
    if key not in obj:
        if nullable:
            return None
        raise RecordError(source=source, line=line, field=key, message="missing")
    value = obj[key]
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise RecordError(source=source, line=line, field=key, message="must be a string")
    if "\x00" in value:
        raise RecordError(source=source, line=line, field=key, message="contains a NUL character")
    return value


def _object(value: Any, source: str, line: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(source=source, line=line, field="", message="each line must be a JSON object")
    return value


def parse_problem(obj: Any, *, source: str, line: int) -> ProblemRow:
    row = _object(obj, source, line)
    unique_id = _require_str(row, "unique_id", source, line) or ""
    if not unique_id.strip():
        raise RecordError(source=source, line=line, field="unique_id", message="must not be empty")
    if len(unique_id) > 255:
        raise RecordError(source=source, line=line, field="unique_id", message="longer than 255 characters")
    problem = _require_str(row, "problem", source, line) or ""
    if not problem.strip():
        raise RecordError(source=source, line=line, field="problem", message="must not be empty")
    raw_level = row.get("level")
    level: int | None = None
    if raw_level is not None:
        if isinstance(raw_level, int) and not isinstance(raw_level, bool):
            level = raw_level
        elif isinstance(raw_level, str) and (match := _LEVEL.match(raw_level.strip())):
            level = int(match.group(1))
        elif raw_level != "Level ?":
            raise RecordError(
                source=source, line=line, field="level", message=f"must be an integer or 'Level N', got {raw_level!r}"
            )
    split = _require_str(row, "split", source, line, nullable=True)
    if split is None:
        split = unique_id.split("/", 1)[0] if unique_id.split("/", 1)[0] in Split.values else ""
    if split not in Split.values:
        raise RecordError(
            source=source, line=line, field="split", message=f"must be train, test or empty, got {split!r}"
        )
    return ProblemRow(
        unique_id=unique_id,
        problem=problem,
        solution=_require_str(row, "solution", source, line, nullable=True),
        answer=_require_str(row, "answer", source, line, nullable=True),
        subject=_require_str(row, "subject", source, line, nullable=True) or "",
        level=level,
        split=split,
    )


# Decoded JSON values with where they came from: (source, line, value). Files
# give (path, line number); an API request gives ("items", index in its list).
Located = tuple[str, int, Any]
LocatedSource = Callable[[], Iterator[Located]]


def _from_files(paths: Iterable[Path]) -> LocatedSource:
    paths = list(paths)

    def located() -> Iterator[Located]:
        for path in paths:
            for line, obj in iter_json_objects(path):
                yield str(path), line, obj

    return located


def _from_items(items: Sequence[Any], source: str) -> LocatedSource:
    def located() -> Iterator[Located]:
        for index, obj in enumerate(items):
            yield source, index, obj

    return located


def _iter_parsed(located: LocatedSource, parse: Callable[..., Any]) -> Iterator[Any]:
    for source, line, obj in located():
        yield parse(obj, source=source, line=line)


def problems_import(*, paths: Iterable[Path], dry_run: bool = False, progress: Progress | None = None) -> ImportResult:
    return _problems_import(_from_files(paths), dry_run=dry_run, progress=progress)


def problems_import_items(*, items: Sequence[Any], source: str = "items", dry_run: bool = False) -> ImportResult:
    """The same import from decoded JSON values (the API); an error's ``line`` is the item's index."""
    return _problems_import(_from_items(items, source), dry_run=dry_run, progress=None)


def _problems_import(located: LocatedSource, *, dry_run: bool, progress: Progress | None) -> ImportResult:
    result = ImportResult(dry_run=dry_run)
    seen: dict[str, tuple[str, int]] = {}
    # Pass 1: validate everything before writing anything.
    for source, line, obj in located():
        row = parse_problem(obj, source=source, line=line)
        if row.unique_id in seen:
            first = seen[row.unique_id]
            raise RecordError(
                source=source,
                line=line,
                field="unique_id",
                message=f"duplicate {row.unique_id!r} (first seen at {first[0]}:{first[1]})",
            )
        seen[row.unique_id] = (source, line)
    with transaction.atomic():
        batch: list[ProblemRow] = []
        for row in _iter_parsed(located, parse_problem):
            result.read += 1
            batch.append(row)
            _tick(progress)
            if len(batch) >= WRITE_BATCH:
                _write_problems(batch, result)
                batch = []
        _write_problems(batch, result)
        if dry_run:
            # Everything was written and checked; a dry run keeps none of it.
            transaction.set_rollback(True)
    return result


def _write_problems(rows: list[ProblemRow], result: ImportResult) -> None:
    if not rows:
        return
    existing = set(
        Problem.objects.filter(unique_id__in=[r.unique_id for r in rows]).values_list("unique_id", flat=True)
    )
    new = [
        Problem(
            unique_id=r.unique_id,
            problem=r.problem,
            problem_sha256=text_sha256(r.problem),
            solution=r.solution,
            answer=r.answer,
            subject=r.subject,
            level=r.level,
            split=r.split,
        )
        for r in rows
        if r.unique_id not in existing
    ]
    Problem.objects.bulk_create(new)
    result.created["problems"] += len(new)
    result.skipped += len(rows) - len(new)


# --- Solution pools --------------------------------------------------------


@dataclass(frozen=True)
class SolutionRow:
    problem_id: str
    steps: tuple[str, ...]
    answer: str | None
    model: str
    alternatives: tuple[tuple[int, str], ...]


def split_steps(text: str) -> tuple[str, ...]:
    """One step per non-empty line, as the generator wrote them."""
    return tuple(line for line in (raw.strip() for raw in text.split("\n")) if line)


def parse_solution(obj: Any, *, source: str, line: int) -> SolutionRow:
    row = _object(obj, source, line)
    problem_id = _require_str(row, "problem_id", source, line) or ""
    raw_steps = row.get("steps")
    if isinstance(raw_steps, str):
        steps = split_steps(raw_steps)
    elif isinstance(raw_steps, list):
        for i, step in enumerate(raw_steps):
            if not isinstance(step, str) or not step.strip():
                raise RecordError(source=source, line=line, field=f"steps[{i}]", message="must be a non-empty string")
        steps = tuple(raw_steps)
    elif "steps" not in row:
        raise RecordError(source=source, line=line, field="steps", message="missing")
    else:
        raise RecordError(
            source=source, line=line, field="steps", message="must be a list of strings or newline-separated text"
        )
    if not steps:
        raise RecordError(source=source, line=line, field="steps", message="has no steps")
    alternatives: list[tuple[int, str]] = []
    raw_alts = row.get("alternatives", [])
    if not isinstance(raw_alts, list):
        raise RecordError(source=source, line=line, field="alternatives", message="must be a list")
    for i, alt in enumerate(raw_alts):
        where = f"alternatives[{i}]"
        if not isinstance(alt, dict):
            raise RecordError(source=source, line=line, field=where, message='must be {"step": int, "text": str}')
        step_index = alt.get("step")
        if not isinstance(step_index, int) or isinstance(step_index, bool) or not 0 <= step_index < len(steps):
            raise RecordError(
                source=source, line=line, field=f"{where}.step", message=f"must be a step index in 0..{len(steps) - 1}"
            )
        text = alt.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RecordError(source=source, line=line, field=f"{where}.text", message="must be a non-empty string")
        alternatives.append((step_index, text))
    return SolutionRow(
        problem_id=problem_id,
        steps=steps,
        answer=_require_str(row, "answer", source, line, nullable=True),
        model=_require_str(row, "model", source, line, nullable=True) or "",
        alternatives=tuple(alternatives),
    )


def solutions_import(*, paths: Iterable[Path], dry_run: bool = False, progress: Progress | None = None) -> ImportResult:
    return _solutions_import(_from_files(paths), dry_run=dry_run, progress=progress)


def solutions_import_items(*, items: Sequence[Any], source: str = "items", dry_run: bool = False) -> ImportResult:
    """The same import from decoded JSON values (the API); an error's ``line`` is the item's index."""
    return _solutions_import(_from_items(items, source), dry_run=dry_run, progress=None)


def _solutions_import(located: LocatedSource, *, dry_run: bool, progress: Progress | None) -> ImportResult:
    result = ImportResult(dry_run=dry_run)
    wanted: set[str] = set()
    locations: dict[str, tuple[str, int]] = {}
    for source, line, obj in located():
        row = parse_solution(obj, source=source, line=line)
        wanted.add(row.problem_id)
        locations.setdefault(row.problem_id, (source, line))
    problem_ids = dict(Problem.objects.filter(unique_id__in=wanted).values_list("unique_id", "id"))
    missing = sorted(wanted - problem_ids.keys())
    if missing:
        source, line = locations[missing[0]]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise RecordError(
            source=source,
            line=line,
            field="problem_id",
            message=f"unknown problem {missing[0]!r}{more}; import the problems first",
        )
    with transaction.atomic():
        batch: list[SolutionRow] = []
        for row in _iter_parsed(located, parse_solution):
            result.read += 1
            batch.append(row)
            _tick(progress)
            if len(batch) >= WRITE_BATCH:
                _write_solutions(batch, problem_ids, result)
                batch = []
        _write_solutions(batch, problem_ids, result)
        if dry_run:
            # Everything was written and checked; a dry run keeps none of it.
            transaction.set_rollback(True)
    return result


def _write_solutions(rows: list[SolutionRow], problem_ids: dict[str, int], result: ImportResult) -> None:
    if not rows:
        return
    keyed = {(problem_ids[r.problem_id], content_sha256(list(r.steps), r.answer), r.model): r for r in rows}
    existing = set(
        Solution.objects.filter(
            problem_id__in={k[0] for k in keyed}, content_sha256__in={k[1] for k in keyed}
        ).values_list("problem_id", "content_sha256", "source_model")
    )
    new_keys = [k for k in keyed if k not in existing]
    created = Solution.objects.bulk_create(
        [
            Solution(
                problem_id=k[0],
                steps=list(keyed[k].steps),
                content_sha256=k[1],
                final_answer=keyed[k].answer,
                source_model=k[2],
            )
            for k in new_keys
        ]
    )
    alternatives = [
        StepAlternative(solution=solution, step_index=step_index, ordinal=ordinal, text=text, source_model=key[2])
        for key, solution in zip(new_keys, created, strict=True)
        for ordinal, (step_index, text) in enumerate(keyed[key].alternatives, 1)
    ]
    # Ordinals count per step, not per solution.
    per_step: dict[tuple[int, int], int] = defaultdict(int)
    for alt in alternatives:
        per_step[(alt.solution.pk, alt.step_index)] += 1
        alt.ordinal = per_step[(alt.solution.pk, alt.step_index)]
    StepAlternative.objects.bulk_create(alternatives)
    result.created["solutions"] += len(created)
    result.created["alternatives"] += len(alternatives)
    result.skipped += len(rows) - len(created)


# --- PRM800K records -------------------------------------------------------


def prm800k_problem_id(record: Record) -> str:
    """A deterministic id for a problem known only from the release.

    The release carries no problem id; the reference fields are part of the
    key so two records only share a Problem when their whole question agrees.
    """
    # "\x01" stands for null, which must not collide with "".
    parts = [record.problem, record.ground_truth_solution, record.ground_truth_answer]
    key = "\x00".join("\x01" if part is None else part for part in parts)
    return f"prm800k/{text_sha256(key)[:32]}"


@dataclass
class _TaskSlot:
    """A task known to the importer, existing or about to be created."""

    task: Task
    is_qc: bool
    score: float | None
    absent: str
    labelers: set[int]
    submissions: set[tuple[int, Any]]


class _Prm800kWriter:
    """Writes validated records in batches with a handful of queries per batch.

    Look-ups (problems, solutions, generations, labelers, tasks) are cached
    across batches; everything new in a batch is bulk-created.
    """

    def __init__(self, result: ImportResult) -> None:
        self.result = result
        self.problems: dict[tuple[str, str | None, str | None], int] = {}
        self.solutions: dict[tuple[int, str], int] = {}
        self.generations: dict[int | None, int] = {}
        self.labelers: dict[uuid.UUID, int] = {}
        self.tasks: dict[tuple[int, int, str], list[_TaskSlot]] = {}
        self.alternatives: dict[tuple[int, int], list[str]] = {}

    def write(self, batch: list[tuple[str, int, Record]]) -> None:
        if not batch:
            return
        records = [r for _, _, r in batch]
        self._ensure_problems(records)
        self._ensure_generations(records)
        self._ensure_labelers(records)
        solution_ids = self._ensure_solutions(batch)
        slots = self._slots_for(records, solution_ids)

        # Several records of a batch may share one new task: create it once.
        unsaved = [task for task in (c.task for c in slots if c is not None) if task.pk is None]
        new_tasks = list({id(task): task for task in unsaved}.values())
        task_fields = (
            "generation_id", "solution_id", "kind", "is_quality_control", "serial", "verifier_score",
            "priority", "absent_question_keys", "status",
        )  # fmt: skip
        rows = [{name: getattr(task, name) for name in task_fields} for task in new_tasks]
        for task, pk in zip(new_tasks, insert_rows(Task, rows), strict=True):
            task.pk = pk
        self.result.created["tasks"] += len(new_tasks)

        assignment_rows: list[dict[str, Any]] = []
        payloads: list[Record] = []
        for record, slot in zip(records, slots, strict=True):
            if slot is None:
                self.result.skipped += 1
                continue
            started = None
            submitted = _aware(record)
            if submitted is not None and record.total_time is not None:
                started = submitted - timedelta(milliseconds=record.total_time)
            assignment_rows.append(
                {
                    "task_id": slot.task.pk,
                    "labeler_id": self.labelers[record.labeler],
                    "status": AssignmentStatus.SUBMITTED.value,
                    "started_at": started,
                    "last_activity_at": submitted,
                    "submitted_at": submitted,
                    "total_time_ms": record.total_time,
                    "finish_reason": record.finish_reason,
                    "label_steps_json": orjson.dumps(record_to_dict(record)["label"]["steps"]).decode(),
                }
            )
            payloads.append(record)
        assignment_ids = insert_rows(Assignment, assignment_rows)
        self.result.created["assignments"] += len(assignment_ids)
        step_rows = [
            {
                "assignment_id": assignment_id,
                "index": i,
                "chosen_completion": step.chosen_completion,
                "human_completion": step.human_completion,
            }
            for assignment_id, record in zip(assignment_ids, payloads, strict=True)
            for i, step in enumerate(record.steps)
        ]
        step_ids = insert_rows(LabeledStep, step_rows)
        self.result.created["labeled steps"] += len(step_ids)
        source_steps = (step for record in payloads for step in record.steps)
        ratings = [
            {
                "step_id": step_id,
                "completion_index": j,
                "text": completion.text,
                "rating": completion.rating,
                "flagged": completion.flagged,
            }
            for step_id, step in zip(step_ids, source_steps, strict=True)
            for j, completion in enumerate(step.completions)
        ]
        insert_rows(StepRating, ratings)
        self.result.created["step ratings"] += len(ratings)
        self._store_alternatives(
            [
                (solution_id, record)
                for record, slot, solution_id in zip(records, slots, solution_ids, strict=True)
                if slot is not None
            ]
        )
        # Everything written so far is in the database, which stays the source
        # of truth: dropping the per-solution caches keeps memory flat at
        # release scale (the next batch re-reads what it needs).
        self.solutions.clear()
        self.tasks.clear()
        self.alternatives.clear()

    def _ensure_problems(self, records: list[Record]) -> None:
        missing = {
            (r.problem, r.ground_truth_solution, r.ground_truth_answer): r
            for r in records
            if (r.problem, r.ground_truth_solution, r.ground_truth_answer) not in self.problems
        }
        if not missing:
            return
        # A MATH problem imported earlier is reused when the whole question matches.
        for pk, text, solution, answer in Problem.objects.filter(
            problem_sha256__in={text_sha256(key[0]) for key in missing}
        ).values_list("id", "problem", "solution", "answer"):
            self.problems.setdefault((text, solution, answer), pk)
        new = {key: r for key, r in missing.items() if key not in self.problems}
        by_uid = {prm800k_problem_id(r): key for key, r in new.items()}
        for uid, pk in Problem.objects.filter(unique_id__in=by_uid).values_list("unique_id", "id"):
            self.problems[by_uid[uid]] = pk
        to_create = [
            Problem(
                unique_id=uid,
                problem=key[0],
                problem_sha256=text_sha256(key[0]),
                solution=key[1],
                answer=key[2],
            )
            for uid, key in by_uid.items()
            if key not in self.problems
        ]
        for problem in Problem.objects.bulk_create(to_create):
            self.problems[(problem.problem, problem.solution, problem.answer)] = problem.pk
        self.result.created["problems"] += len(to_create)

    def _ensure_generations(self, records: list[Record]) -> None:
        for number in {r.generation for r in records} - self.generations.keys():
            if number is None:
                generation = Generation.objects.filter(number__isnull=True, phase=Phase.ONE).first()
            else:
                generation = Generation.objects.filter(number=number).first()
            if generation is None:
                generation = Generation.objects.create(
                    number=number,
                    phase=Phase.ONE if number is None else Phase.TWO,
                    # Imported rounds are history: nothing in them is served.
                    status=GenerationStatus.CLOSED,
                )
                self.result.created["generations"] += 1
            self.generations[number] = generation.pk

    def _ensure_labelers(self, records: list[Record]) -> None:
        wanted = {r.labeler for r in records} - self.labelers.keys()
        if not wanted:
            return
        for pk, labeler_uuid in Labeler.objects.filter(uuid__in=wanted).values_list("id", "uuid"):
            self.labelers[labeler_uuid] = pk
        new = [Labeler(uuid=u, status=LabelerStatus.ACTIVE) for u in wanted - self.labelers.keys()]
        for labeler in Labeler.objects.bulk_create(new):
            self.labelers[labeler.uuid] = labeler.pk
        self.result.created["labelers"] += len(new)

    def _ensure_solutions(self, batch: list[tuple[str, int, Record]]) -> list[int]:
        keys: list[tuple[int, str]] = []
        wanted: dict[tuple[int, str], Record] = {}
        for _, _, record in batch:
            problem_id = self.problems[(record.problem, record.ground_truth_solution, record.ground_truth_answer)]
            steps = list(record.pre_generated_steps) if record.pre_generated_steps is not None else None
            key = (problem_id, content_sha256(steps, record.pre_generated_answer))
            keys.append(key)
            if key not in self.solutions:
                wanted.setdefault(key, record)
        if wanted:
            for pk, problem_id, digest in Solution.objects.filter(
                problem_id__in={k[0] for k in wanted}, content_sha256__in={k[1] for k in wanted}, source_model=""
            ).values_list("id", "problem_id", "content_sha256"):
                self.solutions[(problem_id, digest)] = pk
            to_create = {
                key: {
                    "problem_id": key[0],
                    "steps": list(r.pre_generated_steps) if r.pre_generated_steps is not None else None,
                    "content_sha256": key[1],
                    "final_answer": r.pre_generated_answer,
                }
                for key, r in wanted.items()
                if key not in self.solutions
            }
            new_ids = insert_rows(Solution, list(to_create.values()))
            self.solutions.update(zip(to_create, new_ids, strict=True))
            self.result.created["solutions"] += len(to_create)
        return [self.solutions[key] for key in keys]

    def _slots_for(self, records: list[Record], solution_ids: list[int]) -> list[_TaskSlot | None]:
        """The task each record's assignment joins (None: the record is already imported)."""
        keys = [
            (self.generations[r.generation], solution_id, str(_kind(r)))
            for r, solution_id in zip(records, solution_ids, strict=True)
        ]
        self._load_tasks({k for k in keys if k not in self.tasks})
        slots: list[_TaskSlot | None] = []
        for record, key in zip(records, keys, strict=True):
            labeler_id = self.labelers[record.labeler]
            submitted = _aware(record)
            candidates = self.tasks[key]
            # The same labeler submitting the same task at the same instant is
            # the same record imported again. Without a timestamp, no telling.
            if submitted is not None and any((labeler_id, submitted) in c.submissions for c in candidates):
                slots.append(None)
                continue
            absent = ",".join(record.absent_question_keys)
            slot = next(
                (
                    c
                    for c in candidates
                    if labeler_id not in c.labelers
                    and c.is_qc == record.is_quality_control_question
                    and c.score == record.pre_generated_verifier_score
                    and c.absent == absent
                ),
                None,
            )
            if slot is None:
                task = Task(
                    generation_id=key[0],
                    solution_id=key[1],
                    kind=key[2],
                    is_quality_control=record.is_quality_control_question,
                    serial=max((c.task.serial for c in candidates), default=-1) + 1,
                    verifier_score=record.pre_generated_verifier_score,
                    priority=record.pre_generated_verifier_score or 0.0,
                    absent_question_keys=absent,
                    status=TaskStatus.DONE,
                )
                slot = _TaskSlot(task, task.is_quality_control, task.verifier_score, absent, set(), set())
                candidates.append(slot)
            slot.labelers.add(labeler_id)
            slot.submissions.add((labeler_id, submitted))
            slots.append(slot)
        return slots

    def _load_tasks(self, keys: set[tuple[int, int, str]]) -> None:
        if not keys:
            return
        for key in keys:
            self.tasks[key] = []
        existing = Task.objects.filter(
            generation_id__in={k[0] for k in keys}, solution_id__in={k[1] for k in keys}
        ).order_by("id")
        by_id: dict[int, _TaskSlot] = {}
        for task in existing:
            key = (task.generation_id, task.solution_id, task.kind)
            if key in keys:
                slot = _TaskSlot(
                    task, task.is_quality_control, task.verifier_score, task.absent_question_keys, set(), set()
                )
                self.tasks[key].append(slot)
                by_id[task.pk] = slot
        for task_id, labeler_id, submitted in Assignment.objects.filter(task_id__in=by_id).values_list(
            "task_id", "labeler_id", "submitted_at"
        ):
            by_id[task_id].labelers.add(labeler_id)
            by_id[task_id].submissions.add((labeler_id, submitted))

    def _store_alternatives(self, pairs: list[tuple[int, Record]]) -> None:
        """Alternatives rated at a step become the solution's stored alternatives."""
        wanted = {
            (solution_id, index)
            for solution_id, record in pairs
            if record.pre_generated_steps is not None
            for index, step in enumerate(record.steps)
            if len(step.completions) > 1
        }
        unknown = wanted - self.alternatives.keys()
        if unknown:
            for key in unknown:
                self.alternatives[key] = []
            for solution_id, index, text in (
                StepAlternative.objects.filter(solution_id__in={k[0] for k in unknown})
                .order_by("solution_id", "step_index", "ordinal")
                .values_list("solution_id", "step_index", "text")
            ):
                if (solution_id, index) in unknown:
                    self.alternatives[(solution_id, index)].append(text)
        new: list[StepAlternative] = []
        for solution_id, record in pairs:
            if record.pre_generated_steps is None:
                continue
            for index, step in enumerate(record.steps):
                known = self.alternatives.get((solution_id, index))
                if known is None:
                    continue
                for completion in step.completions[1:]:
                    if completion.text not in known:
                        known.append(completion.text)
                        new.append(
                            StepAlternative(
                                solution_id=solution_id, step_index=index, ordinal=len(known), text=completion.text
                            )
                        )
        StepAlternative.objects.bulk_create(new)
        self.result.created["alternatives"] += len(new)


def _kind(record: Record) -> TaskKind:
    if record.is_initial_screening_question:
        return TaskKind.SCREENING
    if record.is_quality_control_question:
        return TaskKind.QUALITY_CONTROL
    return TaskKind.NORMAL


def _aware(record: Record) -> Any:
    return record.timestamp.replace(tzinfo=UTC) if record.timestamp is not None else None


def prm800k_import(*, paths: Iterable[Path], dry_run: bool = False, progress: Progress | None = None) -> ImportResult:
    paths = list(paths)
    result = ImportResult(dry_run=dry_run)
    # Records are validated as they stream into one transaction: the first
    # bad line raises and rolls back everything written before it, so memory
    # stays flat at release scale and a failed import leaves nothing behind.
    with transaction.atomic():
        writer = _Prm800kWriter(result)
        batch: list[tuple[str, int, Record]] = []
        for path in paths:
            for line, record in iter_records(path):
                result.read += 1
                batch.append((str(path), line, record))
                _tick(progress)
                if len(batch) >= WRITE_BATCH:
                    writer.write(batch)
                    batch = []
        writer.write(batch)
        if dry_run:
            # Everything was written and checked; a dry run keeps none of it.
            transaction.set_rollback(True)
    return result
