"""export_prm800k: filters, stdout and gzip targets, atomic files, manifests, one snapshot."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.db import connection

from labeling.data.exports import ExportFilters, iter_prm800k_records, prm800k_export
from labeling.data.release_import import prm800k_import
from labeling.data.snapshot import read_snapshot
from labeling.models import Assignment, Labeler

# The annotated example record of the public release README (three labeled
# steps, four alternatives rated at the error step), as one JSONL line.
REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "prm800k-readme-example.jsonl"


def example() -> dict[str, Any]:
    return dict(json.loads(REFERENCE.read_text().splitlines()[0]))


def variant(n: int, **changes: Any) -> dict[str, Any]:
    record = copy.deepcopy(example())
    record["labeler"] = str(uuid.UUID(int=n + 1))
    record["timestamp"] = f"2023-02-{n + 1:02d}T10:00:00.{n + 1:06d}"
    for key, value in changes.items():
        if key == "finish_reason":
            record["label"]["finish_reason"] = value
        else:
            record[key] = value
    return record


@pytest.fixture
def dataset(tmp_path: Path) -> list[dict[str, Any]]:
    records = [
        variant(0),
        variant(1, generation=3),
        variant(2, is_quality_control_question=True),
        variant(3, generation=-1, is_initial_screening_question=True),
        variant(4, finish_reason="give_up"),
        variant(5, finish_reason="bad_problem"),
    ]
    phase_one = variant(6, generation=None)
    for key in ("pre_generated_steps", "pre_generated_answer", "pre_generated_verifier_score"):
        phase_one["question"].pop(key)
    records.append(phase_one)
    path = tmp_path / "dataset.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    prm800k_import(paths=[path])
    return records


def export(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "out.jsonl"
    call_command("export_prm800k", "--output", str(out), "--no-progress", *args)
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), [0, 1, 2, 3, 4, 5, 6]),
        (("--phase", "1"), [6]),
        (("--phase", "2"), [0, 1, 2, 3, 4, 5]),
        (("--generation", "3"), [1]),
        (("--generation", "3", "--generation", "-1"), [1, 3]),
        (("--exclude-quality-control",), [0, 1, 3, 4, 5, 6]),
        (("--exclude-screening",), [0, 1, 2, 4, 5, 6]),
        (("--finished-only",), [0, 1, 2, 3, 6]),
        (("--exclude-quality-control", "--exclude-screening", "--finished-only"), [0, 1, 6]),
    ],
)
def test_it_filters(tmp_path: Path, dataset: list[dict[str, Any]], args: tuple[str, ...], expected: list[int]) -> None:
    assert export(tmp_path, *args) == [dataset[i] for i in expected]


@pytest.mark.django_db
def test_it_leaves_out_labelers_marked_excluded_unless_asked(tmp_path: Path, dataset: list[dict[str, Any]]) -> None:
    Labeler.objects.filter(uuid=uuid.UUID(int=1)).update(exclude_labels=True)

    assert export(tmp_path) == dataset[1:]
    assert export(tmp_path, "--include-excluded-labelers") == dataset


@pytest.mark.django_db
def test_it_writes_a_manifest_with_count_and_sha256(tmp_path: Path, dataset: list[dict[str, Any]]) -> None:
    out = tmp_path / "out.jsonl.gz"
    call_command("export_prm800k", "--output", str(out), "--no-progress")

    manifest = json.loads((tmp_path / "out.jsonl.gz.manifest.json").read_text())
    assert manifest["records"] == len(dataset)
    assert manifest["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert manifest["format"] == "prm800k"


@pytest.mark.django_db
def test_why_each_solution_was_served_goes_beside_the_records_not_into_them(
    tmp_path: Path, dataset: list[dict[str, Any]]
) -> None:
    from labeling.models import SelectionReason, Task, TaskKind

    # Imported work says so; a task the pipeline picked as a convincing wrong answer says that.
    normal = Task.objects.filter(kind=TaskKind.NORMAL, generation__number=3).get()
    Task.objects.filter(pk=normal.pk).update(selection_reason=SelectionReason.CONVINCING_WRONG_ANSWER)
    out = tmp_path / "out.jsonl"

    records = export(tmp_path)

    assert records == dataset  # the PRM800K records themselves are exactly the release's
    manifest = json.loads((tmp_path / "out.jsonl.manifest.json").read_text())
    assert manifest["selection_file"] == "out.jsonl.selection.jsonl"
    lines = [json.loads(line) for line in out.with_name(manifest["selection_file"]).read_text().splitlines()]
    assert [line["record"] for line in lines] == list(range(1, len(dataset) + 1))
    reasons = [line["selection_reason"] for line in lines]
    assert reasons[1] == "convincing_wrong_answer"  # the generation-3 record
    assert set(reasons[:1] + reasons[2:]) == {"imported"}


@pytest.mark.django_db
def test_it_writes_to_stdout(dataset: list[dict[str, Any]], capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    call_command("export_prm800k", "--output", "-")

    lines = capfdbinary.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == dataset


@pytest.mark.django_db
def test_an_interrupted_export_keeps_the_previous_file(tmp_path: Path, dataset: list[dict[str, Any]]) -> None:
    out = tmp_path / "exports" / "out.jsonl"
    out.parent.mkdir()
    out.write_text("previous export\n")

    def crash(_: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prm800k_export(output=str(out), progress=crash)

    assert out.read_text() == "previous export\n"
    assert [p.name for p in out.parent.iterdir()] == ["out.jsonl"]  # no partial file left behind


@pytest.mark.django_db(transaction=True)
def test_it_reads_one_snapshot_while_labels_are_written(tmp_path: Path, dataset: list[dict[str, Any]]) -> None:
    later = tmp_path / "later.jsonl"
    later.write_bytes(orjson.dumps(variant(20)) + b"\n")

    def import_from_another_connection() -> None:
        try:
            prm800k_import(paths=[later])
        finally:
            connection.close()

    with read_snapshot():
        records = iter_prm800k_records(ExportFilters())
        first = next(records)
        writer = threading.Thread(target=import_from_another_connection)
        writer.start()
        writer.join(timeout=30)
        rest = list(records)

    assert not writer.is_alive()
    assert Assignment.objects.count() == len(dataset) + 1  # the write happened...
    assert [first, *rest] == dataset  # ...but the export did not see it


@pytest.mark.django_db
def test_frozen_labels_and_rebuilt_labels_export_the_same(tmp_path: Path, dataset: list[dict[str, Any]]) -> None:
    frozen = export(tmp_path)
    # Assignments submitted before labels were frozen have none: rebuilt from rows.
    Assignment.objects.update(label_steps_json=None)

    assert export(tmp_path) == frozen == dataset


@pytest.mark.django_db
@pytest.mark.parametrize(
    "timestamp", ["2023-01-22T04:34:27", "2023-01-22T04:34:27.100000", "2023-01-22T04:34:27.000001", None]
)
def test_it_writes_timestamps_exactly_as_the_release_does(tmp_path: Path, timestamp: str | None) -> None:
    record = variant(0)
    record["timestamp"] = timestamp
    path = tmp_path / "one.jsonl"
    path.write_bytes(orjson.dumps(record) + b"\n")
    prm800k_import(paths=[path])

    [exported] = export(tmp_path)

    assert exported["timestamp"] == timestamp


@pytest.mark.django_db
def test_the_file_and_manifest_are_readable_by_the_group_and_no_bar_is_left_behind(
    tmp_path: Path, dataset: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import stat

    out = tmp_path / "labels.jsonl"
    previous = os.umask(0o027)
    try:
        call_command("export_prm800k", "--output", str(out))  # progress on, stderr not a terminal
    finally:
        os.umask(previous)
    for path in (out, out.with_name(out.name + ".manifest.json")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0o666 under the umask, not mkstemp's 0o600
    captured = capsys.readouterr()
    assert f"wrote {len(dataset)} record(s)" in captured.out
    assert captured.err == ""  # no empty progress bar after the result line
