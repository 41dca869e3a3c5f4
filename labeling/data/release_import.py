"""Importing the PRM800K release: labeled records, with their problems, solutions, labelers and tasks.

One transaction, written in batches of ``WRITE_BATCH`` records while the
files stream: each record is validated as it is read, and the first bad line
raises and rolls back everything written before it, so memory stays flat at
release scale and a failed import leaves nothing behind. Errors name the file,
the line and the field. Importing the same records again adds nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import orjson
from django.db import transaction

from labeling.data.bulkload import insert_rows
from labeling.data.imports import WRITE_BATCH, ImportResult, Progress, progress_tick
from labeling.data.prm800k import Record, iter_records, record_to_dict
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
    SelectionReason,
    Solution,
    StepAlternative,
    StepRating,
    Task,
    TaskKind,
    TaskStatus,
    content_sha256,
    text_sha256,
)

# What an imported assignment's row holds; the rest takes the columns' defaults.
ASSIGNMENT_COLUMNS = (
    "task_id", "task_kind", "labeler_id", "status", "started_at", "last_activity_at", "submitted_at",
    "total_time_ms", "finish_reason", "label_steps_json",
)  # fmt: skip


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
            "priority", "absent_question_keys", "status", "selection_reason",
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
            assignment = Assignment.for_task(
                slot.task,
                labeler_id=self.labelers[record.labeler],
                status=AssignmentStatus.SUBMITTED.value,
                started_at=started,
                last_activity_at=submitted,
                submitted_at=submitted,
                total_time_ms=record.total_time,
                finish_reason=record.finish_reason,
                label_steps_json=orjson.dumps(record_to_dict(record)["label"]["steps"]).decode(),
            )
            assignment_rows.append({name: getattr(assignment, name) for name in ASSIGNMENT_COLUMNS})
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
                    selection_reason=SelectionReason.IMPORTED,
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
                progress_tick(progress)
                if len(batch) >= WRITE_BATCH:
                    writer.write(batch)
                    batch = []
        writer.write(batch)
        if dry_run:
            # Everything was written and checked; a dry run keeps none of it.
            transaction.set_rollback(True)
    return result
