"""The import commands: clear errors naming file, line and field; nothing written on error."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from labeling.models import Assignment, Problem, Solution, StepAlternative, StepRating
from tests.labeling.workflow_factories import make_assignment

# The annotated example record of the public release README (three labeled
# steps, four alternatives rated at the error step), as one JSONL line.
REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "prm800k-readme-example.jsonl"


def example() -> dict[str, Any]:
    return dict(json.loads(REFERENCE.read_text().splitlines()[0]))


def jsonl(path: Path, *rows: Any) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows))
    return path


def run_import(command: str, *args: str) -> None:
    call_command(command, *args, "--no-progress")


def broken(mutate: Any) -> dict[str, Any]:
    record = copy.deepcopy(example())
    mutate(record)
    return record


BAD_RECORDS = [
    ("malformed JSON", b'{"labeler": ', ":2: malformed JSON"),
    ("missing field", broken(lambda r: r.pop("label")), ":2: label: missing"),
    ("mistyped field", broken(lambda r: r.update(generation="9")), ":2: generation: must be an integer or null"),
    (
        "rating outside -1/0/+1",
        broken(lambda r: r["label"]["steps"][1]["completions"][0].update(rating=2)),
        ":2: label.steps[1].completions[0].rating: must be -1, 0, 1 or null, got 2",
    ),
    (
        "unknown finish reason",
        broken(lambda r: r["label"].update(finish_reason="timeout")),
        ":2: label.finish_reason: must be one of found_error, solution, bad_problem, give_up, got 'timeout'",
    ),
    (
        "chosen completion out of range",
        broken(lambda r: r["label"]["steps"][0].update(chosen_completion=3)),
        ":2: label.steps[0].chosen_completion: index 3 is out of range: the step has 1 completion(s)",
    ),
    ("labeler not a UUID", broken(lambda r: r.update(labeler="alice@example.com")), ":2: labeler: must be a UUID"),
    (
        "timestamp with a zone",
        broken(lambda r: r.update(timestamp="2023-01-22T04:34:27+00:00")),
        ":2: timestamp: must be ISO 8601",
    ),
    ("unknown field", broken(lambda r: r["question"].update(extra=1)), ":2: question.extra: unknown field"),
    (
        "boolean as rating",
        broken(lambda r: r["label"]["steps"][0]["completions"][0].update(rating=True)),
        ":2: label.steps[0].completions[0].rating: must be an integer or null, got a boolean",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("case", "bad", "message"), BAD_RECORDS, ids=[c[0] for c in BAD_RECORDS])
def test_it_rejects_a_bad_record_naming_file_line_and_field_and_writes_nothing(
    tmp_path: Path, case: str, bad: Any, message: str
) -> None:
    # A good record first: it must not be written either.
    path = jsonl(tmp_path / "release.jsonl", example(), bad)

    with pytest.raises(CommandError) as raised:
        run_import("import_prm800k", str(path))

    assert f"{path}{message}" in str(raised.value)
    assert "Nothing was written" in str(raised.value)
    assert Assignment.objects.count() == 0
    assert Problem.objects.count() == 0


@pytest.mark.django_db
def test_it_rejects_a_bad_line_in_the_second_file_and_keeps_the_first_unwritten(tmp_path: Path) -> None:
    good = jsonl(tmp_path / "a.jsonl", example())
    bad = jsonl(tmp_path / "b.jsonl", example(), b"[1, 2]")

    with pytest.raises(CommandError, match=r"b\.jsonl:2: must be an object"):
        run_import("import_prm800k", str(good), str(bad))

    assert StepRating.objects.count() == 0


@pytest.mark.django_db
def test_dry_run_validates_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = jsonl(tmp_path / "release.jsonl", example())

    run_import("import_prm800k", str(path), "--dry-run")

    assert "would create" in capsys.readouterr().out
    assert Assignment.objects.count() == 0


@pytest.mark.django_db
def test_it_says_which_file_is_missing() -> None:
    with pytest.raises(CommandError, match=r"nope\.jsonl: no such file"):
        run_import("import_prm800k", "nope.jsonl")


MATH_ROWS: list[dict[str, Any]] = [
    {
        "problem": "What is $1+1$?",
        "solution": "$1+1=\\boxed{2}$.",
        "answer": "2",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    },
    {
        "problem": "Compute $\\frac{1}{2}+\\frac{1}{4}$.",
        "solution": "It is $\\boxed{\\frac34}$.",
        "answer": "\\frac34",
        "subject": "Algebra",
        "level": "Level 2",
        "unique_id": "train/algebra/7.json",
    },
]


@pytest.mark.django_db
def test_it_imports_math_problems_with_split_from_the_id(tmp_path: Path) -> None:
    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))

    rows = list(Problem.objects.order_by("unique_id").values_list("unique_id", "answer", "level", "split", "subject"))
    assert rows == [
        ("test/prealgebra/1.json", "2", 1, "test", "Prealgebra"),
        ("train/algebra/7.json", "\\frac34", 2, "train", "Algebra"),
    ]


@pytest.mark.django_db
def test_it_skips_problems_it_already_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = jsonl(tmp_path / "math.jsonl", *MATH_ROWS)
    run_import("import_problems", str(path))
    run_import("import_problems", str(path))

    assert Problem.objects.count() == 2
    assert "2 already present" in capsys.readouterr().out


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({**MATH_ROWS[0], "level": "hard"}, ":1: level: must be an integer or 'Level N'"),
        ({k: v for k, v in MATH_ROWS[0].items() if k != "problem"}, ":1: problem: missing"),
        ({**MATH_ROWS[0], "unique_id": ""}, ":1: unique_id: must not be empty"),
    ],
)
def test_it_rejects_bad_problems(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    path = jsonl(tmp_path / "math.jsonl", row)
    with pytest.raises(CommandError, match=message):
        run_import("import_problems", str(path))


@pytest.mark.django_db
def test_it_rejects_duplicate_problem_ids_in_one_file(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "math.jsonl", MATH_ROWS[0], MATH_ROWS[0])
    with pytest.raises(CommandError, match=r":2: unique_id: duplicate .* \(first seen at .*math.jsonl:1\)"):
        run_import("import_problems", str(path))
    assert Problem.objects.count() == 0


@pytest.mark.django_db
def test_it_imports_solution_pools_as_lists_or_text(tmp_path: Path) -> None:
    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))
    pool = jsonl(
        tmp_path / "pool.jsonl",
        {"problem_id": "test/prealgebra/1.json", "steps": ["$1+1=2$.", "# Answer\n\n2"], "answer": "2", "model": "m"},
        {
            "problem_id": "test/prealgebra/1.json",
            "steps": "We add.\n\n$1+1=3$.\n# Answer 3",
            "answer": "3",
            "model": "m",
            "alternatives": [{"step": 1, "text": "$1+1=2$."}],
        },
    )

    run_import("import_solutions", str(pool))
    run_import("import_solutions", str(pool))  # idempotent

    solutions = {tuple(s.steps or []): s for s in Solution.objects.all()}
    assert set(solutions) == {("$1+1=2$.", "# Answer\n\n2"), ("We add.", "$1+1=3$.", "# Answer\n\n3")}
    assert list(StepAlternative.objects.values_list("step_index", "ordinal", "text")) == [(1, 1, "$1+1=2$.")]


SAMPLE = "Let $a_1 = 1$.\nThen $a_{n+1} = -a_n$ for every $n$.\nTherefore, $a_{1964} = -1$."


def sample(key: str, steps: str = SAMPLE, **extra: Any) -> dict[str, Any]:
    row = {"problem_id": "test/prealgebra/1.json", "steps": steps, "model": "gpt-4", "generator": "champ v0"}
    return row | {"source_key": key} | extra


@pytest.mark.django_db
def test_it_keeps_provenance_and_stores_the_answer_the_steps_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))
    pool = jsonl(
        tmp_path / "pool.jsonl",
        sample("GPT-4|0-Shot"),
        sample("GPT-4|5-Shot", "Step-wise solution:\nWe try.\n\\[\nx = 2\n\\]\nSo 1964 is not a prime number."),
        sample("GPT-4|Hint", "We try some cases.\nThe pattern is unclear.", summary="There is no solution."),
        sample("GPT-4|Plain", "We try some cases.\nThe pattern is unclear."),
        sample("GPT-4|Given", "We try.\nIt is 5.", answer="5"),
    )

    run_import("import_solutions", str(pool))

    stored = {s.source_key: s for s in Solution.objects.all()}
    assert {key: s.final_answer for key, s in stored.items()} == {
        "GPT-4|0-Shot": "-1",
        "GPT-4|5-Shot": "1964 is not a prime number",
        "GPT-4|Hint": "There is no solution",  # from the summary turn: the steps state nothing
        "GPT-4|Plain": None,  # no answer found
        "GPT-4|Given": "5",  # an answer given is kept as given
    }
    assert stored["GPT-4|5-Shot"].steps == ["We try.", "\\[\nx = 2\n\\]", "So 1964 is not a prime number."]
    assert {(s.generator, s.source_model) for s in stored.values()} == {("champ v0", "gpt-4")}


@pytest.mark.django_db
def test_it_reports_duplicates_within_the_input_apart_from_rows_already_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))
    first = jsonl(tmp_path / "first.jsonl", sample("a"))
    run_import("import_solutions", str(first))
    capsys.readouterr()
    second = jsonl(
        tmp_path / "second.jsonl",
        sample("a"),  # already stored
        sample("b", "One.\nTwo."),
        sample("b", "One.\nTwo."),  # the same sample twice in the file
        sample("c", "One.\nTwo."),  # the same text under another key
    )

    run_import("import_solutions", str(second))

    out = capsys.readouterr().out
    assert "read 4 record(s); created 1 solutions; 1 already present; 2 duplicate(s) within the input" in out
    assert sorted(Solution.objects.values_list("source_key", flat=True)) == ["a", "b"]


@pytest.mark.django_db
def test_a_source_key_naming_two_different_samples_is_refused(tmp_path: Path) -> None:
    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))
    clash = jsonl(tmp_path / "clash.jsonl", sample("a"), sample("a", "Other.\nSteps."))
    with pytest.raises(CommandError, match=r"clash.jsonl:2: source_key: 'a' already names a different sample at .*:1"):
        run_import("import_solutions", str(clash))
    assert not Solution.objects.exists()

    run_import("import_solutions", str(jsonl(tmp_path / "first.jsonl", sample("a"))))
    later = jsonl(tmp_path / "later.jsonl", sample("b", "Fine.\nSteps."), sample("a", "Other.\nSteps."))
    with pytest.raises(CommandError, match=r"later.jsonl:2: source_key: 'a' already names solution \d+"):
        run_import("import_solutions", str(later))
    assert list(Solution.objects.values_list("source_key", flat=True)) == ["a"]


@pytest.mark.django_db
def test_exports_of_imported_samples_carry_the_extracted_answer_and_no_provenance(tmp_path: Path) -> None:
    from django.utils import timezone

    from labeling.data.exports import iter_prm800k_records
    from labeling.models import AssignmentStatus, Generation, Task
    from tests.labeling.workflow_factories import make_labeler

    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))
    run_import("import_solutions", str(jsonl(tmp_path / "pool.jsonl", sample("GPT-4|0-Shot"))))
    task = Task.objects.create(generation=Generation.objects.create(number=0), solution=Solution.objects.get())
    make_assignment(
        task,
        labeler=make_labeler(),
        status=AssignmentStatus.SUBMITTED,
        submitted_at=timezone.now(),
        finish_reason="solution",
    )

    (record,) = iter_prm800k_records()

    assert record["question"]["pre_generated_answer"] == "-1"
    assert record["question"]["pre_generated_steps"] == SAMPLE.split("\n")
    assert "source_key" not in json.dumps(record) and "GPT-4|0-Shot" not in json.dumps(record)


@pytest.mark.django_db
def test_it_refuses_solutions_for_unknown_problems(tmp_path: Path) -> None:
    pool = jsonl(tmp_path / "pool.jsonl", {"problem_id": "test/x/404.json", "steps": ["a"], "model": "m"})
    with pytest.raises(CommandError, match=r"pool.jsonl:1: problem_id: unknown problem 'test/x/404.json'"):
        run_import("import_solutions", str(pool))


@pytest.mark.django_db
def test_it_names_a_bad_alternative(tmp_path: Path) -> None:
    run_import("import_problems", str(jsonl(tmp_path / "math.jsonl", *MATH_ROWS)))
    pool = jsonl(
        tmp_path / "pool.jsonl",
        {"problem_id": "test/prealgebra/1.json", "steps": ["a"], "alternatives": [{"step": 4, "text": "b"}]},
    )
    with pytest.raises(CommandError, match=r":1: alternatives\[0\]\.step: must be a step index in 0\.\.0"):
        run_import("import_solutions", str(pool))


# --- Truncated files and imports that create nothing ----------------------------------------------


def _truncated_gz(path: Path, rows: list[Any], keep: float) -> Path:
    import gzip

    whole = gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    path.write_bytes(whole[: int(len(whole) * keep)])
    return path


@pytest.mark.django_db
def test_it_names_the_line_where_a_truncated_gz_file_breaks_off_and_writes_nothing(tmp_path: Path) -> None:
    rows = [{**MATH_ROWS[0], "unique_id": f"test/prealgebra/{i}.json"} for i in range(400)]
    path = _truncated_gz(tmp_path / "math.jsonl.gz", rows, keep=0.6)
    with pytest.raises(CommandError) as failure:
        run_import("import_problems", str(path))
    message = str(failure.value)
    # Not "line 0": the line after the last whole one, whichever way the stream breaks off.
    line = int(message.split(":")[1])
    assert 100 < line < 400, message
    assert "breaks off after line" in message or "malformed JSON" in message, message
    assert "Nothing was written" in message
    assert Problem.objects.count() == 0


@pytest.mark.django_db
def test_it_says_plainly_that_an_empty_file_imported_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"\n\n")
    run_import("import_problems", str(path))
    assert "Nothing was imported: the input holds no records" in capsys.readouterr().out
    with pytest.raises(CommandError, match="holds no records"):
        run_import("import_prm800k", str(path), "--strict")


@pytest.mark.django_db
def test_it_says_plainly_that_a_file_of_records_already_present_imported_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jsonl(tmp_path / "math.jsonl", *MATH_ROWS)
    run_import("import_problems", str(path))
    capsys.readouterr()
    run_import("import_problems", str(path))
    assert "Nothing was imported: every one of the 2 record(s) was already present" in capsys.readouterr().out
    with pytest.raises(CommandError, match="--strict"):
        run_import("import_problems", str(path), "--strict")
    # --strict with something new to import succeeds.
    run_import(
        "import_problems",
        str(jsonl(tmp_path / "more.jsonl", {**MATH_ROWS[0], "unique_id": "test/x/9.json"})),
        "--strict",
    )
    assert Problem.objects.count() == 3
