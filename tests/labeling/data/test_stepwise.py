"""The TRL stepwise-supervision export (labeling.data.stepwise, manage.py export_stepwise)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from labeling.data.stepwise import Neutral, parquet_available, stepwise_row
from labeling.models import FinishReason
from tests.labeling.admin_factories import make_submitted
from tests.labeling.workflow_factories import STEPS, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _record(steps: list[dict[str, object]]) -> dict[str, object]:
    return {"question": {"problem": "What is 1+1?"}, "label": {"steps": steps}}


def _step(*completions: tuple[str, int | None], chosen: int | None = 0, human: str | None = None) -> dict[str, object]:
    return {
        "completions": [{"text": t, "rating": r, "flagged": None} for t, r in completions],
        "chosen_completion": chosen,
        "human_completion": human,
    }


def test_it_follows_the_trajectory_and_stops_at_the_first_error() -> None:
    record = _record([_step(("a", 1)), _step(("b", 0)), _step(("c", -1), ("c'", 1), chosen=None)])
    assert stepwise_row(record) == {
        "prompt": "What is 1+1?",
        "completions": ["a", "b", "c"],
        "labels": [True, True, False],
    }


def test_it_takes_the_chosen_alternative_and_human_steps_as_correct() -> None:
    record = _record(
        [_step(("a", -1), ("a2", 1), chosen=1), _step(chosen=None, human="my step"), _step(("z", 1), chosen=None)]
    )
    assert stepwise_row(record) == {
        "prompt": "What is 1+1?",
        "completions": ["a2", "my step", "z"],
        "labels": [True, True, True],
    }


@pytest.mark.parametrize(
    ("neutral", "expected"),
    [(Neutral.POSITIVE, [True, True, True]), (Neutral.NEGATIVE, [True, False, True]), (Neutral.DROP, [True])],
)
def test_it_maps_neutral_ratings_as_asked(neutral: Neutral, expected: list[bool]) -> None:
    record = _record([_step(("a", 1)), _step(("b", 0)), _step(("c", 1), chosen=None)])
    row = stepwise_row(record, neutral=neutral)
    assert row is not None
    assert row["labels"] == expected
    assert len(row["completions"]) == len(expected)


def test_it_ends_at_an_unrated_step_and_skips_empty_rows() -> None:
    assert stepwise_row(_record([_step(("a", 1)), _step(("b", None), chosen=None)]))["labels"] == [True]  # type: ignore[index]
    assert stepwise_row(_record([_step(("a", None), chosen=None)])) is None
    assert stepwise_row(_record([_step(("a", 0), chosen=None)]), neutral=Neutral.DROP) is None


def test_it_writes_trl_jsonl_with_a_manifest(tmp_path: Path) -> None:
    generation = make_generation(number=0)
    labeler = make_labeler()
    make_submitted(task=make_task(generation=generation), labeler=labeler, ratings=[1, 1, 1, 1, 1])
    make_submitted(
        task=make_task(generation=generation),
        labeler=labeler,
        ratings=[1, 0, -1],
        finish_reason=FinishReason.FOUND_ERROR,
        alternatives_at_last=[("alt", 1)],
    )
    output = tmp_path / "prm.jsonl"
    call_command("export_stepwise", "--output", str(output), "--no-progress")

    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["labels"] for r in rows] == [[True] * 5, [True, True, False]]
    assert rows[1]["completions"] == STEPS[:3]
    for row in rows:
        assert set(row) == {"prompt", "completions", "labels"}
        assert isinstance(row["prompt"], str)
        assert all(isinstance(c, str) for c in row["completions"])
        assert all(isinstance(v, bool) for v in row["labels"])
        assert len(row["completions"]) == len(row["labels"])
    manifest = json.loads((tmp_path / "prm.jsonl.manifest.json").read_text())
    assert manifest["records"] == 2
    assert manifest["format"] == "stepwise-jsonl"
    assert manifest["neutral"] == "positive"


def test_it_writes_negative_neutral_labels_from_the_command(tmp_path: Path) -> None:
    make_submitted(
        task=make_task(generation=make_generation(number=0)), labeler=make_labeler(), ratings=[1, 0, 1, 1, 1]
    )
    output = tmp_path / "neg.jsonl"
    call_command("export_stepwise", "-o", str(output), "--neutral", "negative", "--no-progress")
    assert json.loads(output.read_text())["labels"] == [True, False, True, True, True]


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="datasets is not installed")
def test_it_loads_with_hugging_face_datasets(tmp_path: Path) -> None:  # pragma: no cover - needs datasets
    import datasets  # type: ignore[import-not-found, unused-ignore]

    make_submitted(task=make_task(generation=make_generation(number=0)), labeler=make_labeler(), ratings=[1, 1, -1])
    output = tmp_path / "prm.jsonl"
    call_command("export_stepwise", "-o", str(output), "--no-progress")
    loaded = datasets.load_dataset("json", data_files=str(output), split="train")
    assert loaded.column_names == ["prompt", "completions", "labels"]


@pytest.mark.skipif(parquet_available(), reason="pyarrow is installed: Parquet is written")
def test_it_refuses_parquet_without_pyarrow(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="pyarrow"):
        call_command("export_stepwise", "-o", str(tmp_path / "x.parquet"), "--parquet", "--no-progress")
    assert list(tmp_path.iterdir()) == []
