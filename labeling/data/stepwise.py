"""Exporting labeled solutions in the stepwise-supervision format of TRL's ``PRMTrainer``.

One row per submitted assignment (one labeled solution)::

    {"prompt": <problem>, "completions": [<step>, ...], "labels": [true, ..., false]}

The trajectory is the one the labeler walked: at each labeled step the
completion the solution continued with (``chosen_completion``), or the
labeler's own step (``human_completion``, always correct), and at the step
where labeling stopped the solution's own step (completion 0) with its rating.
Ratings map to labels as +1 → true, -1 → false, and 0 (neutral) as asked:

- ``positive``: neutral is true (PRM800K's own "neutral is acceptable" reading),
- ``negative``: neutral is false,
- ``drop``: the trajectory is cut before its first neutral step.

A step without a rating ends the trajectory (a give-up can stop mid-way), and
a row with no step left is not written.

The records come from ``labeling.data.exports.iter_prm800k_records`` inside one
``read_snapshot()``; a file target is written to a temporary name and renamed,
with a manifest beside it, exactly as the PRM800K export does.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from labeling.data.exports import CHUNK, ExportFilters, iter_prm800k_records
from labeling.data.files import ExportResult, HashingWriter, export_file_write, lines_write
from labeling.data.snapshot import read_snapshot


class Neutral(enum.StrEnum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    DROP = "drop"


class ParquetUnavailable(RuntimeError):
    """Parquet output needs pyarrow, which is not installed."""


def stepwise_row(record: dict[str, Any], *, neutral: Neutral = Neutral.POSITIVE) -> dict[str, Any] | None:
    """The TRL row for one PRM800K record, or None when no labeled step is left."""
    completions: list[str] = []
    labels: list[bool] = []
    for step in record["label"]["steps"]:
        chosen = step["chosen_completion"]
        human = step["human_completion"]
        options = step["completions"]
        if chosen is not None:
            if not 0 <= chosen < len(options):
                break
            text, rating = options[chosen]["text"], options[chosen]["rating"]
        elif human is not None:
            text, rating = human, 1
        elif options:
            text, rating = options[0]["text"], options[0]["rating"]
        else:
            break
        if rating is None:
            break
        if rating == 0:
            if neutral == Neutral.DROP:
                break
            label = neutral == Neutral.POSITIVE
        else:
            label = rating > 0
        completions.append(text)
        labels.append(label)
        if chosen is None and human is None:
            break  # the step where labeling stopped
    if not completions:
        return None
    return {"prompt": record["question"]["problem"], "completions": completions, "labels": labels}


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def stepwise_export(
    *,
    output: str,
    filters: ExportFilters | None = None,
    neutral: Neutral = Neutral.POSITIVE,
    parquet: bool = False,
    progress: Callable[[int], object] | None = None,
) -> ExportResult:
    """Write rows to ``output`` (JSONL, or Parquet when ``parquet``) with a manifest beside it.

    ``progress`` is called once per PRM800K record read (rows written may be fewer).
    """
    if parquet and not parquet_available():
        raise ParquetUnavailable("Parquet output needs pyarrow, which is not installed; write JSONL instead.")
    filters = filters or ExportFilters()

    def write(sink: HashingWriter, path: Path) -> int:
        with read_snapshot():
            rows = _counted(iter_prm800k_records(filters), neutral=neutral, progress=progress)
            # pyarrow writes by path; the file's bytes are hashed after it closed it.
            return _write_parquet(rows, path) if parquet else lines_write(sink, (orjson.dumps(row) for row in rows))

    return export_file_write(
        output,
        file_format="stepwise-parquet" if parquet else "stepwise-jsonl",
        details={"neutral": neutral.value, "filters": dataclasses.asdict(filters)},
        write=write,
    )


def _counted(
    records: Iterator[dict[str, Any]], *, neutral: Neutral, progress: Callable[[int], object] | None
) -> Iterator[dict[str, Any]]:
    for record in records:
        if progress is not None:
            progress(1)
        row = stepwise_row(record, neutral=neutral)
        if row is not None:
            yield row


def _write_parquet(rows: Iterator[dict[str, Any]], path: Path) -> int:  # pragma: no cover - needs pyarrow
    import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-not-found, unused-ignore]

    schema = pa.schema(
        [("prompt", pa.string()), ("completions", pa.list_(pa.string())), ("labels", pa.list_(pa.bool_()))]
    )
    count = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            count += 1
            if len(batch) >= CHUNK:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                batch.clear()
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    return count
