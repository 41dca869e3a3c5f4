"""import_prm800k followed by export_prm800k gives back every record, value for value."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labeling.data.exports import iter_prm800k_records
from labeling.data.release_import import prm800k_import
from labeling.data.snapshot import read_snapshot
from labeling.models import Assignment, Generation, LabeledStep, Problem, StepAlternative, StepRating, Task

# The annotated example record of the public release README (three labeled
# steps, four alternatives rated at the error step), as one JSONL line.
REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "prm800k-readme-example.jsonl"


def readme_example() -> dict[str, Any]:
    return dict(json.loads(REFERENCE.read_text().splitlines()[0]))


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def export_all(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "export.jsonl"
    call_command("export_prm800k", "--output", str(out), "--no-progress", *args)
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.django_db
def test_it_round_trips_the_readme_example_exactly(tmp_path: Path) -> None:
    record = readme_example()
    path = write_jsonl(tmp_path / "in.jsonl", [record])

    call_command("import_prm800k", str(path), "--no-progress")
    exported = export_all(tmp_path)

    assert exported == [record]
    # Key order too, as the release writes it.
    assert list(exported[0]) == list(record)
    assert list(exported[0]["question"]) == list(record["question"])


@pytest.mark.django_db
def test_it_stores_the_example_as_three_labeled_steps_with_alternatives_at_the_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [readme_example()])

    prm800k_import(paths=[path])

    assignment = Assignment.objects.get()
    assert assignment.finish_reason == "found_error"
    assert assignment.total_time_ms == 278270
    assert assignment.task.generation.number == 9
    steps = list(LabeledStep.objects.order_by("index").values_list("index", "chosen_completion"))
    assert steps == [(0, 0), (1, 0), (2, None)]
    assert StepRating.objects.filter(step__index=2).count() == 5
    # The four alternatives become the solution's stored alternatives for step 2.
    assert list(StepAlternative.objects.values_list("step_index", "ordinal")) == [(2, 1), (2, 2), (2, 3), (2, 4)]
    assert (assignment.task.solution.steps or [])[2].startswith("I know that $200,\\!000")


@pytest.mark.django_db
def test_it_reads_gzip_and_writes_gzip(tmp_path: Path) -> None:
    record = readme_example()
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(gzip.compress(orjson.dumps(record) + b"\n"))

    call_command("import_prm800k", str(path), "--no-progress")
    out = tmp_path / "out.jsonl.gz"
    call_command("export_prm800k", "--output", str(out), "--no-progress")

    assert [json.loads(line) for line in gzip.decompress(out.read_bytes()).splitlines()] == [record]


@pytest.mark.django_db
def test_it_does_not_duplicate_records_imported_twice(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [readme_example()])

    prm800k_import(paths=[path])
    second = prm800k_import(paths=[path])

    assert second.skipped == 1
    assert Assignment.objects.count() == 1
    assert StepAlternative.objects.count() == 4


@pytest.mark.django_db
def test_it_keeps_two_labelers_on_one_solution_as_one_task(tmp_path: Path) -> None:
    first = readme_example()
    second = readme_example() | {"labeler": str(uuid.UUID(int=7)), "timestamp": "2023-01-23T01:02:03.000004"}

    prm800k_import(paths=[write_jsonl(tmp_path / "in.jsonl", [first, second])])

    assert Task.objects.count() == 1
    assert Assignment.objects.count() == 2
    assert export_all(tmp_path) == [first, second]


# --- property-based round trip over generated records ----------------------

texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40
)
ratings = st.sampled_from([-1, 0, 1, None])
flags = st.sampled_from([True, False, None])


@st.composite
def label_steps(draw: st.DrawFn, pre_steps: list[str] | None) -> tuple[list[dict[str, Any]], str]:
    count = draw(st.integers(min_value=0, max_value=5))
    steps = []
    for i in range(count):
        n = draw(st.integers(min_value=1, max_value=4))
        completions = [{"text": draw(texts), "rating": draw(ratings), "flagged": draw(flags)} for _ in range(n)]
        if pre_steps is not None and i < len(pre_steps):
            completions[0]["text"] = pre_steps[i]
        chosen = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=n - 1)))
        human = draw(st.one_of(st.none(), texts))
        steps.append({"completions": completions, "human_completion": human, "chosen_completion": chosen})
    finish = draw(st.sampled_from(["found_error", "solution", "bad_problem", "give_up"]))
    return steps, finish


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    phase_one = draw(st.booleans())
    generation = None if phase_one else draw(st.integers(min_value=-1, max_value=12))
    pre_steps = None if phase_one else draw(st.lists(texts, min_size=1, max_size=6))
    question: dict[str, Any] = {
        "problem": draw(st.sampled_from(["What is $1+1$?", "Find $x$ if $2x=\\frac{1}{2}$.", "Compute $20!$."])),
        "ground_truth_solution": draw(st.one_of(st.none(), texts)),
        "ground_truth_answer": draw(st.one_of(st.none(), st.sampled_from(["2", "\\frac14", "40,\\!000"]))),
        "pre_generated_steps": pre_steps,
        "pre_generated_answer": None if phase_one else draw(st.one_of(st.none(), texts)),
        "pre_generated_verifier_score": None
        if phase_one
        else draw(st.one_of(st.none(), st.floats(min_value=0, max_value=1, allow_nan=False))),
    }
    if phase_one and draw(st.booleans()):
        for key in ("pre_generated_steps", "pre_generated_answer", "pre_generated_verifier_score"):
            del question[key]
    steps, finish = draw(label_steps(pre_steps))
    timestamp = draw(
        st.one_of(
            st.none(),
            st.datetimes(
                min_value=__import__("datetime").datetime(2022, 1, 1),
                max_value=__import__("datetime").datetime(2024, 1, 1),
            ).map(lambda d: d.isoformat()),
        )
    )
    screening = generation == -1
    return {
        "labeler": str(draw(st.uuids())),
        "timestamp": timestamp,
        "generation": generation,
        "is_quality_control_question": draw(st.booleans()),
        "is_initial_screening_question": screening,
        "question": question,
        "label": {
            "steps": steps,
            "total_time": draw(st.one_of(st.none(), st.integers(min_value=0, max_value=10**9))),
            "finish_reason": finish,
        },
    }


@pytest.mark.django_db
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(records(), min_size=1, max_size=6))
def test_it_round_trips_generated_records(tmp_path: Path, batch: list[dict[str, Any]]) -> None:
    # Hypothesis reuses the database across examples: start each one clean.
    for model in (StepRating, LabeledStep, Assignment, Task, StepAlternative, Generation, Problem):
        model.objects.all().delete()
    path = write_jsonl(tmp_path / "gen.jsonl", batch)

    prm800k_import(paths=[path])
    with read_snapshot():
        exported = list(iter_prm800k_records())

    # Export order is import order, except that an exact duplicate of an
    # earlier record (same labeler, time and task) is stored once.
    expected = []
    for record in batch:
        if record not in expected:
            expected.append(record)
    assert sorted(map(orjson.dumps, exported)) == sorted(map(orjson.dumps, expected))
