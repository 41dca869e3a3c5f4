"""The PRM800K record format: reading, validating and writing records.

Plain Python, no ORM: the importer (``labeling.data.imports``) and the exporter
(``labeling.data.exports``) sit on top. Validation names the file, the line and the
field path of the first problem it finds, e.g.
``data.jsonl:12: label.steps[3].completions[0].rating: must be -1, 0, 1 or null, got 2``.
"""

from __future__ import annotations

import gzip
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson

FINISH_REASONS = ("found_error", "solution", "bad_problem", "give_up")
# Optional in phase-1 records: the release may omit them instead of writing null.
PRE_GENERATED_KEYS = ("pre_generated_steps", "pre_generated_answer", "pre_generated_verifier_score")

TOP_KEYS = (
    "labeler",
    "timestamp",
    "generation",
    "is_quality_control_question",
    "is_initial_screening_question",
    "question",
    "label",
)
QUESTION_KEYS = ("problem", "ground_truth_solution", "ground_truth_answer", *PRE_GENERATED_KEYS)
LABEL_KEYS = ("steps", "total_time", "finish_reason")
STEP_KEYS = ("completions", "human_completion", "chosen_completion")
COMPLETION_KEYS = ("text", "rating", "flagged")


class RecordError(ValueError):
    """A record that does not follow the format, located to file, line and field."""

    def __init__(self, *, source: str, line: int, field: str, message: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.message = message
        where = f"{source}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    rating: int | None
    flagged: bool | None


@dataclass(frozen=True, slots=True)
class Step:
    completions: tuple[Completion, ...]
    human_completion: str | None
    chosen_completion: int | None


@dataclass(frozen=True, slots=True)
class Record:
    labeler: uuid.UUID
    timestamp: datetime | None
    generation: int | None
    is_quality_control_question: bool
    is_initial_screening_question: bool
    problem: str
    ground_truth_solution: str | None
    ground_truth_answer: str | None
    pre_generated_steps: tuple[str, ...] | None
    pre_generated_answer: str | None
    pre_generated_verifier_score: float | None
    # Which of PRE_GENERATED_KEYS the record left out (as opposed to null).
    absent_question_keys: tuple[str, ...]
    steps: tuple[Step, ...]
    total_time: int | None
    finish_reason: str


class _Checker:
    """Field checks that raise RecordError with the path of the bad field."""

    def __init__(self, source: str, line: int) -> None:
        self.source = source
        self.line = line

    def fail(self, field: str, message: str) -> RecordError:
        return RecordError(source=self.source, line=self.line, field=field, message=message)

    def obj(self, value: Any, field: str, keys: tuple[str, ...], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be an object, got {_kind(value)}")
        unknown = [key for key in value if key not in keys]
        if unknown:
            raise self.fail(_join(field, unknown[0]), f"unknown field (expected one of: {', '.join(keys)})")
        for key in keys:
            if key not in value and key not in optional:
                raise self.fail(_join(field, key), "missing")
        return value

    def string(self, value: Any, field: str, *, nullable: bool = False) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            expected = "a string or null" if nullable else "a string"
            raise self.fail(field, f"must be {expected}, got {_kind(value)}")
        if "\x00" in value:
            raise self.fail(field, "contains a NUL character, which cannot be stored")
        return value

    def integer(self, value: Any, field: str, *, nullable: bool = False, minimum: int | None = None) -> int | None:
        if value is None and nullable:
            return None
        # bool is an int in Python but not in the format.
        if not isinstance(value, int) or isinstance(value, bool):
            expected = "an integer or null" if nullable else "an integer"
            raise self.fail(field, f"must be {expected}, got {_kind(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(field, f"must be at least {minimum}, got {value}")
        return value

    def boolean(self, value: Any, field: str, *, nullable: bool = False) -> bool | None:
        if value is None and nullable:
            return None
        if not isinstance(value, bool):
            expected = "true, false or null" if nullable else "true or false"
            raise self.fail(field, f"must be {expected}, got {_kind(value)}")
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def parse_timestamp(raw: str) -> datetime:
    """The release writes naive ISO 8601 (UTC) with microseconds."""
    parsed = datetime.fromisoformat(raw)
    if parsed.tzinfo is not None:
        raise ValueError("must have no time zone")
    return parsed


def format_timestamp(value: datetime) -> str:
    # Python's isoformat() is what produced the release: microseconds are
    # written when non-zero, so parse -> format gives back the same string.
    return value.replace(tzinfo=None).isoformat()


def validate_record(obj: Any, *, source: str = "<input>", line: int = 1) -> Record:
    c = _Checker(source, line)
    top = c.obj(obj, "", TOP_KEYS)

    labeler_raw = c.string(top["labeler"], "labeler")
    assert labeler_raw is not None
    try:
        labeler = uuid.UUID(labeler_raw)
    except ValueError:
        raise c.fail("labeler", f"must be a UUID, got {labeler_raw!r}") from None

    timestamp_raw = c.string(top["timestamp"], "timestamp", nullable=True)
    timestamp = None
    if timestamp_raw is not None:
        try:
            timestamp = parse_timestamp(timestamp_raw)
        except ValueError as exc:
            raise c.fail("timestamp", f"must be ISO 8601 like 2023-01-22T04:34:27.052924 ({exc})") from None
        if format_timestamp(timestamp) != timestamp_raw:
            raise c.fail("timestamp", f"must be written as YYYY-MM-DDTHH:MM:SS[.ffffff], got {timestamp_raw!r}")

    generation = c.integer(top["generation"], "generation", nullable=True, minimum=-1)
    is_qc = c.boolean(top["is_quality_control_question"], "is_quality_control_question")
    is_screening = c.boolean(top["is_initial_screening_question"], "is_initial_screening_question")
    assert is_qc is not None and is_screening is not None

    question = c.obj(top["question"], "question", QUESTION_KEYS, optional=PRE_GENERATED_KEYS)
    problem = c.string(question["problem"], "question.problem")
    assert problem is not None
    gt_solution = c.string(question["ground_truth_solution"], "question.ground_truth_solution", nullable=True)
    gt_answer = c.string(question["ground_truth_answer"], "question.ground_truth_answer", nullable=True)
    absent = tuple(key for key in PRE_GENERATED_KEYS if key not in question)

    pre_steps: tuple[str, ...] | None = None
    raw_steps = question.get("pre_generated_steps")
    if raw_steps is not None:
        if not isinstance(raw_steps, list):
            raise c.fail("question.pre_generated_steps", f"must be a list of strings or null, got {_kind(raw_steps)}")
        pre_steps = tuple(
            c.string(text, f"question.pre_generated_steps[{i}]") or "" for i, text in enumerate(raw_steps)
        )
    pre_answer = c.string(question.get("pre_generated_answer"), "question.pre_generated_answer", nullable=True)
    score_raw = question.get("pre_generated_verifier_score")
    score: float | None = None
    if score_raw is not None:
        if isinstance(score_raw, bool) or not isinstance(score_raw, int | float):
            raise c.fail("question.pre_generated_verifier_score", f"must be a number or null, got {_kind(score_raw)}")
        score = float(score_raw)

    label = c.obj(top["label"], "label", LABEL_KEYS)
    raw_label_steps = label["steps"]
    if not isinstance(raw_label_steps, list):
        raise c.fail("label.steps", f"must be a list, got {_kind(raw_label_steps)}")
    steps = tuple(_validate_step(c, raw, f"label.steps[{i}]") for i, raw in enumerate(raw_label_steps))
    total_time = c.integer(label["total_time"], "label.total_time", nullable=True, minimum=0)
    finish_reason = c.string(label["finish_reason"], "label.finish_reason")
    if finish_reason not in FINISH_REASONS:
        raise c.fail("label.finish_reason", f"must be one of {', '.join(FINISH_REASONS)}, got {finish_reason!r}")
    assert finish_reason is not None

    return Record(
        labeler=labeler,
        timestamp=timestamp,
        generation=generation,
        is_quality_control_question=is_qc,
        is_initial_screening_question=is_screening,
        problem=problem,
        ground_truth_solution=gt_solution,
        ground_truth_answer=gt_answer,
        pre_generated_steps=pre_steps,
        pre_generated_answer=pre_answer,
        pre_generated_verifier_score=score,
        absent_question_keys=absent,
        steps=steps,
        total_time=total_time,
        finish_reason=finish_reason,
    )


def _validate_step(c: _Checker, raw: Any, field: str) -> Step:
    step = c.obj(raw, field, STEP_KEYS)
    raw_completions = step["completions"]
    if not isinstance(raw_completions, list):
        raise c.fail(f"{field}.completions", f"must be a list, got {_kind(raw_completions)}")
    completions = []
    for j, raw_completion in enumerate(raw_completions):
        where = f"{field}.completions[{j}]"
        completion = c.obj(raw_completion, where, COMPLETION_KEYS)
        text = c.string(completion["text"], f"{where}.text")
        rating = c.integer(completion["rating"], f"{where}.rating", nullable=True)
        if rating not in (-1, 0, 1, None):
            raise c.fail(f"{where}.rating", f"must be -1, 0, 1 or null, got {rating}")
        flagged = c.boolean(completion["flagged"], f"{where}.flagged", nullable=True)
        completions.append(Completion(text=text or "", rating=rating, flagged=flagged))
    human = c.string(step["human_completion"], f"{field}.human_completion", nullable=True)
    chosen = c.integer(step["chosen_completion"], f"{field}.chosen_completion", nullable=True, minimum=0)
    if chosen is not None and chosen >= len(completions):
        raise c.fail(
            f"{field}.chosen_completion",
            f"index {chosen} is out of range: the step has {len(completions)} completion(s)",
        )
    return Step(completions=tuple(completions), human_completion=human, chosen_completion=chosen)


def record_to_dict(record: Record) -> dict[str, Any]:
    """The record as the release writes it (key order included)."""
    question: dict[str, Any] = {
        "problem": record.problem,
        "ground_truth_solution": record.ground_truth_solution,
        "ground_truth_answer": record.ground_truth_answer,
        "pre_generated_steps": list(record.pre_generated_steps) if record.pre_generated_steps is not None else None,
        "pre_generated_answer": record.pre_generated_answer,
        "pre_generated_verifier_score": record.pre_generated_verifier_score,
    }
    for key in record.absent_question_keys:
        del question[key]
    return {
        "labeler": str(record.labeler),
        "timestamp": format_timestamp(record.timestamp) if record.timestamp is not None else None,
        "generation": record.generation,
        "is_quality_control_question": record.is_quality_control_question,
        "is_initial_screening_question": record.is_initial_screening_question,
        "question": question,
        "label": {
            "steps": [
                {
                    "completions": [
                        {"text": comp.text, "rating": comp.rating, "flagged": comp.flagged} for comp in step.completions
                    ],
                    "human_completion": step.human_completion,
                    "chosen_completion": step.chosen_completion,
                }
                for step in record.steps
            ],
            "total_time": record.total_time,
            "finish_reason": record.finish_reason,
        },
    }


def open_text(path: Path) -> IO[bytes]:
    """Open .jsonl or .jsonl.gz for reading as bytes."""
    if path.suffix == ".gz":
        return gzip.GzipFile(path, "rb")  # type: ignore[return-value]  # GzipFile is a binary IO
    return path.open("rb")


def iter_json_objects(path: Path) -> Iterator[tuple[int, Any]]:
    """Decoded JSON values per line; malformed JSON or an unreadable file raises RecordError
    naming the line where reading stopped (a truncated .gz breaks off after its last whole line)."""
    source = str(path)
    number = 0
    try:
        with open_text(path) as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    yield number, orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise RecordError(source=source, line=number, field="", message=f"malformed JSON: {exc}") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        where = f"after line {number}" if number else "before its first line"
        raise RecordError(
            source=source,
            line=number + 1,
            field="",
            message=f"the compressed file breaks off {where} (truncated or corrupt: {exc})",
        ) from None
    except OSError as exc:
        raise RecordError(source=source, line=number + 1, field="", message=f"cannot read file: {exc}") from None


def iter_records(path: Path) -> Iterator[tuple[int, Record]]:
    source = str(path)
    for number, obj in iter_json_objects(path):
        yield number, validate_record(obj, source=source, line=number)
