"""Exporting labeled solutions as PRM800K records.

The export streams one row per record: each submitted assignment carries its
label steps as JSON frozen at submission (rebuilt from the rating rows for
older assignments), read through a server-side cursor, so memory stays flat
however large the database is. All reads happen inside one snapshot (REPEATABLE READ on
PostgreSQL, one read transaction on SQLite's WAL), so ratings written while an
export runs are either wholly in it or wholly absent. The file is written to a
temporary name beside the target and renamed at the end: an interrupted export
never leaves a partial file, and never replaces the previous one.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from django.db.models import Q, TextField
from django.db.models.functions import Cast

from labeling.data.files import ExportResult, HashingWriter, export_file_write, lines_write, write_atomically
from labeling.data.labels import label_steps_for
from labeling.data.snapshot import read_snapshot
from labeling.models import (
    Assignment,
    AssignmentStatus,
    Problem,
    TaskKind,
)

CHUNK = 1000


@dataclass(frozen=True)
class ExportFilters:
    phase: int | None = None
    generations: tuple[int, ...] = ()
    exclude_quality_control: bool = False
    exclude_screening: bool = False
    finished_only: bool = False
    # Labels of labelers flagged "exclude labels" are left out unless asked.
    include_excluded_labelers: bool = False

    def as_q(self) -> Q:
        q = Q(status=AssignmentStatus.SUBMITTED)
        if self.phase is not None:
            q &= Q(task__generation__phase=self.phase)
        if self.generations:
            q &= Q(task__generation__number__in=self.generations)
        if self.exclude_quality_control:
            q &= Q(task__is_quality_control=False)
        if self.exclude_screening:
            q &= ~Q(task__kind=TaskKind.SCREENING)
        if self.finished_only:
            q &= Q(finish_reason__in=["found_error", "solution"])
        if not self.include_excluded_labelers:
            q &= Q(labeler__exclude_labels=False)
        return q


_ASSIGNMENT_FIELDS = (
    "id",
    "labeler_text",
    "submitted_text",
    "total_time_ms",
    "finish_reason",
    "task__kind",
    "task__is_quality_control",
    "task__verifier_score",
    "task__absent_question_keys",
    "task__generation__number",
    "solution_steps_json",
    "task__solution__final_answer",
    "task__solution__problem_id",
    "task__selection_reason",
    "label_steps_json",
)
# Problems repeat across records (PRM800K: ~12k problems for ~100k records), so
# they are read once per export rather than joined into every row; the cache
# is cleared past this size to keep memory bounded whatever the database holds.
_PROBLEM_CACHE_LIMIT = 50_000


def iter_prm800k_records(
    filters: ExportFilters | None = None, *, raw_json: bool = False, reasons: list[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Records in assignment order. Call inside ``read_snapshot()`` for a consistent view.

    One server-side stream of assignments (one row per record): each carries
    its label steps as the JSON frozen at submission, and its solution's steps
    as JSON text. With ``raw_json`` those stay ``orjson.Fragment``s, written
    out without being parsed and re-serialised (the file export); otherwise
    they are decoded to plain lists. Assignments submitted before labels were
    frozen have theirs rebuilt from the rating rows, a chunk at a time.
    Timestamps and labeler ids come from the database as text: parsing them
    into Python objects only to print them again was a fifth of the export.
    With ``reasons``, each record's task's ``selection_reason`` is appended to
    it as the record is yielded (the record format has no place for it).
    """
    filters = filters or ExportFilters()
    rows = (
        Assignment.objects.filter(filters.as_q())
        .order_by("id")
        .annotate(
            solution_steps_json=Cast("task__solution__steps", output_field=TextField()),
            submitted_text=Cast("submitted_at", output_field=TextField()),
            labeler_text=Cast("labeler__uuid", output_field=TextField()),
        )
        .values_list(*_ASSIGNMENT_FIELDS)
        .iterator(chunk_size=CHUNK)
    )
    wrap: Callable[[str], Any] = orjson.Fragment if raw_json else orjson.loads
    problems: dict[int, tuple[str, str | None, str | None]] = {}
    while chunk := list(itertools.islice(rows, CHUNK)):
        rebuilt = label_steps_for([row[0] for row in chunk if row[-1] is None])
        unknown = {row[12] for row in chunk} - problems.keys()
        if unknown:
            if len(problems) > _PROBLEM_CACHE_LIMIT:
                problems.clear()
                unknown = {row[12] for row in chunk}
            for pk, text, solution, answer in Problem.objects.filter(pk__in=unknown).values_list(
                "pk", "problem", "solution", "answer"
            ):
                problems[pk] = (text, solution, answer)
        for row in chunk:
            frozen = row[-1]
            steps = wrap(frozen) if frozen is not None else rebuilt.get(row[0], [])
            if reasons is not None:
                reasons.append(row[13])
            yield _record(row, steps, problems[row[12]], wrap)


def _timestamp_text(value: str) -> str:
    """A submitted_at as the database prints it, in the release's format.

    PostgreSQL (session time zone UTC, which Django sets) prints
    ``2023-01-22 04:34:27.052924+00``; SQLite stores ``2023-01-22
    04:34:27.052924``. Both omit the fraction when it is zero, as Python's
    isoformat() does, which is how the release was written. The round-trip
    property test covers this conversion.
    """
    text = value.replace(" ", "T", 1)
    for suffix in ("+00:00", "+00"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
            break
    # PostgreSQL also drops trailing zeros of the fraction (.00125); Python
    # always writes six digits (.001250).
    whole, dot, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(6, '0')}" if dot else whole


def _uuid_text(value: str) -> str:
    # SQLite stores UUIDs as 32 hex digits; PostgreSQL prints them hyphenated.
    if len(value) == 32:
        return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"
    return value


def _record(
    row: tuple[Any, ...],
    steps: Any,
    problem: tuple[str, str | None, str | None],
    wrap: Callable[[str], Any],
) -> dict[str, Any]:
    (
        _id,
        labeler_text,
        submitted_text,
        total_time_ms,
        finish_reason,
        kind,
        is_qc,
        verifier_score,
        absent_keys,
        generation_number,
        solution_steps_json,
        final_answer,
        _problem_id,
        _selection_reason,
        _frozen,
    ) = row
    problem_text, reference_solution, reference_answer = problem
    solution_steps = wrap(solution_steps_json) if solution_steps_json is not None else None
    question: dict[str, Any] = {
        "problem": problem_text,
        "ground_truth_solution": reference_solution,
        "ground_truth_answer": reference_answer,
        "pre_generated_steps": solution_steps,
        "pre_generated_answer": final_answer,
        "pre_generated_verifier_score": verifier_score,
    }
    if absent_keys:
        for key in absent_keys.split(","):
            question.pop(key, None)
    return {
        "labeler": _uuid_text(labeler_text),
        "timestamp": _timestamp_text(submitted_text) if submitted_text is not None else None,
        "generation": generation_number,
        "is_quality_control_question": is_qc,
        "is_initial_screening_question": kind == TaskKind.SCREENING,
        "question": question,
        "label": {"steps": steps, "total_time": total_time_ms, "finish_reason": finish_reason},
    }


def prm800k_export(
    *,
    output: str,
    filters: ExportFilters | None = None,
    progress: Callable[[int], object] | None = None,
) -> ExportResult:
    """Write records to ``output`` (a path; ``-`` is stdout; ``.gz`` compresses).

    A file target gets a manifest beside it (``<output>.manifest.json``) with
    the record count and the sha256 of the file's bytes, and the records'
    selection reasons (``<output>.selection.jsonl``, ``selection_file``).
    """
    if output == "-":
        with read_snapshot():
            count = lines_write(sys.stdout.buffer, _dumped(iter_prm800k_records(filters, raw_json=True), progress))
        sys.stdout.buffer.flush()
        return ExportResult(path=None, records=count, sha256="", bytes_written=0)

    filters = filters or ExportFilters()
    compress = Path(output).suffix == ".gz"
    selection_file = selection_path(Path(output).resolve())

    def write(sink: HashingWriter, _path: Path) -> int:
        stream: Any = gzip.GzipFile(fileobj=sink, mode="wb", mtime=0) if compress else sink
        reasons: list[str] = []
        with read_snapshot():
            count = lines_write(
                stream, _dumped(iter_prm800k_records(filters, raw_json=True, reasons=reasons), progress)
            )
        if stream is not sink:
            stream.close()
        write_atomically(selection_file, _selection_lines(reasons))
        return count

    details = {"filters": dataclasses.asdict(filters), "selection_file": selection_file.name}
    return export_file_write(output, file_format="prm800k", details=details, write=write)


def selection_path(target: Path) -> Path:
    """Where an export's selection reasons go: beside it, one line per record, in the same order.

    The PRM800K record has no place for a field of ours (readers of the release take the
    record as it is), so why each solution was served (``Task.selection_reason``) is a
    file of its own: line n is ``{"record": n, "selection_reason": ...}`` for the n-th record.
    """
    return target.with_name(target.name + ".selection.jsonl")


def _selection_lines(reasons: list[str]) -> bytes:
    return b"".join(
        orjson.dumps({"record": number, "selection_reason": reason}) + b"\n"
        for number, reason in enumerate(reasons, start=1)
    )


def _dumped(records: Iterator[dict[str, Any]], progress: Callable[[int], object] | None) -> Iterator[bytes]:
    for record in records:
        yield orjson.dumps(record)
        if progress is not None:
            progress(1)
