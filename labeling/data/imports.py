"""Importing MATH-style problems and solution pools, from files or from API requests.

Both imports are all-or-nothing: the input is validated completely before the
first write, and the writes run in one transaction, so a bad line anywhere
leaves the database as it was. Errors name the file, the line and the field.
The PRM800K release has its own importer (labeling.data.release_import).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from labeling.data.prm800k import RecordError, iter_json_objects
from labeling.models import (
    Problem,
    Solution,
    Split,
    StepAlternative,
    content_sha256,
    text_sha256,
)
from mathtext.extraction import extract_final_answer
from mathtext.splitting import split_steps

Progress = Callable[[int], object]

WRITE_BATCH = 2000


@dataclass
class ImportResult:
    read: int = 0
    created: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Already in the database before this import.
    skipped: int = 0
    # Repeats within the input itself (the same sample twice); written once.
    duplicates: int = 0
    dry_run: bool = False

    @property
    def nothing_created(self) -> bool:
        return not any(self.created.values())

    def summary(self) -> str:
        made = ", ".join(f"{count} {name}" for name, count in sorted(self.created.items()) if count) or "nothing"
        verb = "would create" if self.dry_run else "created"
        skipped = f"; {self.skipped} already present" if self.skipped else ""
        duplicates = f"; {self.duplicates} duplicate(s) within the input" if self.duplicates else ""
        line = f"read {self.read} record(s); {verb} {made}{skipped}{duplicates}"
        if self.nothing_created:
            line += f"\n{self.nothing_reason()}"
        return line

    def nothing_reason(self) -> str:
        """Why an import that read its input created nothing, in words."""
        imported = "would be imported" if self.dry_run else "was imported"
        if self.read == 0:
            return f"Nothing {imported}: the input holds no records (empty, or blank lines only)."
        return (
            f"Nothing {imported}: every one of the {self.read} record(s) was already present"
            f"{' or repeated within the input' if self.duplicates else ''}."
        )


def progress_tick(progress: Progress | None) -> None:
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
            progress_tick(progress)
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

_MAX_MODEL = Solution._meta.get_field("source_model").max_length or 200
_MAX_GENERATOR = Solution._meta.get_field("generator").max_length or 200
_MAX_SOURCE_KEY = Solution._meta.get_field("source_key").max_length or 255


@dataclass(frozen=True)
class SolutionRow:
    problem_id: str
    steps: tuple[str, ...]
    # The final answer as given, else as extracted from the steps (or the summary).
    answer: str | None
    model: str
    generator: str
    source_key: str
    alternatives: tuple[tuple[int, str], ...]

    def content_key(self) -> tuple[str, str, str]:
        return (self.problem_id, content_sha256(list(self.steps), self.answer), self.model)


def _bounded_str(obj: dict[str, Any], key: str, source: str, line: int, limit: int) -> str:
    value = _require_str(obj, key, source, line, nullable=True) or ""
    if len(value) > limit:
        raise RecordError(source=source, line=line, field=key, message=f"longer than {limit} characters")
    return value


def parse_solution(obj: Any, *, source: str, line: int) -> SolutionRow:
    row = _object(obj, source, line)
    problem_id = _require_str(row, "problem_id", source, line) or ""
    raw_steps = row.get("steps")
    if isinstance(raw_steps, str):
        steps = tuple(split_steps(raw_steps))
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
    answer = _require_str(row, "answer", source, line, nullable=True)
    summary = _require_str(row, "summary", source, line, nullable=True)
    if answer is None:
        # The answer the steps state (or, failing that, the summary turn); None when
        # they state none, which grading then reports as "no answer found".
        answer = extract_final_answer("\n".join(steps), summary=summary)
    return SolutionRow(
        problem_id=problem_id,
        steps=steps,
        answer=answer,
        model=_bounded_str(row, "model", source, line, _MAX_MODEL),
        generator=_bounded_str(row, "generator", source, line, _MAX_GENERATOR),
        source_key=_bounded_str(row, "source_key", source, line, _MAX_SOURCE_KEY),
        alternatives=tuple(alternatives),
    )


def solutions_import(*, paths: Iterable[Path], dry_run: bool = False, progress: Progress | None = None) -> ImportResult:
    return _solutions_import(_from_files(paths), dry_run=dry_run, progress=progress)


def solutions_import_items(*, items: Sequence[Any], source: str = "items", dry_run: bool = False) -> ImportResult:
    """The same import from decoded JSON values (the API); an error's ``line`` is the item's index."""
    return _solutions_import(_from_items(items, source), dry_run=dry_run, progress=None)


_Location = tuple[str, int]


def _solutions_import(located: LocatedSource, *, dry_run: bool, progress: Progress | None) -> ImportResult:
    result = ImportResult(dry_run=dry_run)
    wanted: set[str] = set()
    locations: dict[str, _Location] = {}
    # In-file duplicates: the same content (kept once, like the database does) or the same
    # source key twice; a source key naming two different samples is an error.
    first_content: set[tuple[str, str, str]] = set()
    first_keys: dict[tuple[str, str, str], tuple[tuple[str, str, str], _Location]] = {}
    duplicates: set[_Location] = set()
    for source, line, obj in located():
        row = parse_solution(obj, source=source, line=line)
        wanted.add(row.problem_id)
        locations.setdefault(row.problem_id, (source, line))
        content = row.content_key()
        if row.source_key:
            key = (row.problem_id, row.generator, row.source_key)
            seen = first_keys.get(key)
            if seen is not None and seen[0] != content:
                raise RecordError(
                    source=source,
                    line=line,
                    field="source_key",
                    message=f"{row.source_key!r} already names a different sample at {seen[1][0]}:{seen[1][1]}",
                )
            first_keys.setdefault(key, (content, (source, line)))
        if content in first_content:
            duplicates.add((source, line))
        first_content.add(content)
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
        batch: list[tuple[_Location, SolutionRow]] = []
        for source, line, obj in located():
            result.read += 1
            progress_tick(progress)
            if (source, line) in duplicates:
                result.duplicates += 1
                continue
            batch.append(((source, line), parse_solution(obj, source=source, line=line)))
            if len(batch) >= WRITE_BATCH:
                _write_solutions(batch, problem_ids, result)
                batch = []
        _write_solutions(batch, problem_ids, result)
        if dry_run:
            # Everything was written and checked; a dry run keeps none of it.
            transaction.set_rollback(True)
    return result


def _write_solutions(
    located_rows: list[tuple[_Location, SolutionRow]], problem_ids: dict[str, int], result: ImportResult
) -> None:
    if not located_rows:
        return
    keyed = {
        (problem_ids[r.problem_id], content_sha256(list(r.steps), r.answer), r.model): (where, r)
        for where, r in located_rows
    }
    existing = set(
        Solution.objects.filter(
            problem_id__in={k[0] for k in keyed}, content_sha256__in={k[1] for k in keyed}
        ).values_list("problem_id", "content_sha256", "source_model")
    )
    _refuse_reused_source_keys(keyed, existing)
    new_keys = [k for k in keyed if k not in existing]
    created = Solution.objects.bulk_create(
        [
            Solution(
                problem_id=k[0],
                steps=list(keyed[k][1].steps),
                content_sha256=k[1],
                final_answer=keyed[k][1].answer,
                source_model=k[2],
                generator=keyed[k][1].generator,
                source_key=keyed[k][1].source_key,
            )
            for k in new_keys
        ]
    )
    alternatives = [
        StepAlternative(solution=solution, step_index=step_index, ordinal=ordinal, text=text, source_model=key[2])
        for key, solution in zip(new_keys, created, strict=True)
        for ordinal, (step_index, text) in enumerate(keyed[key][1].alternatives, 1)
    ]
    # Ordinals count per step, not per solution.
    per_step: dict[tuple[int, int], int] = defaultdict(int)
    for alt in alternatives:
        per_step[(alt.solution.pk, alt.step_index)] += 1
        alt.ordinal = per_step[(alt.solution.pk, alt.step_index)]
    StepAlternative.objects.bulk_create(alternatives)
    result.created["solutions"] += len(created)
    result.created["alternatives"] += len(alternatives)
    result.skipped += len(located_rows) - len(created)


def _refuse_reused_source_keys(
    keyed: dict[tuple[int, str, str], tuple[_Location, SolutionRow]], existing: set[tuple[int, str, str]]
) -> None:
    """A source key already stored for a different solution is an error, not a new sample
    (the ``solution_source_key_unique`` constraint would refuse it less clearly)."""
    with_keys = {k: v for k, v in keyed.items() if v[1].source_key and k not in existing}
    if not with_keys:
        return
    taken = {
        (problem_id, generator, source_key): pk
        for pk, problem_id, generator, source_key in Solution.objects.filter(
            problem_id__in={k[0] for k in with_keys},
            source_key__in={v[1].source_key for v in with_keys.values()},
        ).values_list("pk", "problem_id", "generator", "source_key")
    }
    for key, ((source, line), row) in with_keys.items():
        pk = taken.get((key[0], row.generator, row.source_key))
        if pk is not None:
            raise RecordError(
                source=source,
                line=line,
                field="source_key",
                message=f"{row.source_key!r} already names solution {pk}, whose steps or answer differ",
            )
