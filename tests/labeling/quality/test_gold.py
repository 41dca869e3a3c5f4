"""Gold labels: gold_set, the error-step helper, and import_gold from PRM800K records."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command

from labeling.models import GoldStep, Task, TaskKind
from labeling.quality.gold import GoldError, GoldStepSpec, gold_set, gold_steps_for_errors, solution_is_gold
from tests.labeling.workflow_factories import STEPS, make_generation, make_task

pytestmark = pytest.mark.django_db


def _rows(solution) -> list[tuple[int, bool, bool, bool]]:
    return list(
        GoldStep.objects.filter(solution=solution).values_list("step_index", "negative_ok", "neutral_ok", "positive_ok")
    )


def test_it_writes_one_row_per_step_so_a_solution_without_errors_is_still_gold():
    task = make_task(generation=make_generation())
    assert not solution_is_gold(solution=task.solution)
    gold_set(solution=task.solution, steps=gold_steps_for_errors(step_count=len(STEPS), error_steps=[]))
    assert solution_is_gold(solution=task.solution)
    assert _rows(task.solution) == [(i, False, True, True) for i in range(len(STEPS))]


def test_it_lets_every_acceptable_error_but_the_last_be_passed():
    task = make_task(generation=make_generation())
    gold_set(solution=task.solution, steps=gold_steps_for_errors(step_count=len(STEPS), error_steps=[1, 3]))
    assert _rows(task.solution) == [
        (0, False, True, True),
        (1, True, True, True),
        (2, False, True, True),
        (3, True, False, False),
        (4, False, True, True),
    ]


def test_it_replaces_gold_and_rejects_bad_specs():
    task = make_task(generation=make_generation())
    gold_set(solution=task.solution, steps=[GoldStepSpec(step_index=2, negative_ok=True)])
    gold_set(solution=task.solution, steps=[GoldStepSpec(step_index=4, negative_ok=True)])
    assert [r for r in _rows(task.solution) if r[1]] == [(4, True, True, True)]
    with pytest.raises(GoldError):
        gold_set(solution=task.solution, steps=[GoldStepSpec(step_index=9)])
    with pytest.raises(GoldError):
        gold_set(solution=task.solution, steps=[GoldStepSpec(step_index=1, neutral_ok=False, positive_ok=False)])


def _record(problem: str, steps: list[str], ratings: list[int], finish: str, **changes: Any) -> dict[str, Any]:
    record = {
        "labeler": "00000000-0000-0000-0000-000000000001",
        "timestamp": "2023-02-01T10:00:00",
        "generation": 1,
        "is_quality_control_question": False,
        "is_initial_screening_question": False,
        "question": {
            "problem": problem,
            "ground_truth_solution": "hidden ref",
            "ground_truth_answer": "14",
            "pre_generated_steps": steps,
            "pre_generated_answer": "7",
            "pre_generated_verifier_score": 0.5,
        },
        "label": {
            "steps": [
                {
                    "completions": [{"text": steps[i], "rating": r, "flagged": None}],
                    "human_completion": None,
                    "chosen_completion": None if r == -1 or i == len(ratings) - 1 else 0,
                }
                for i, r in enumerate(ratings)
            ],
            "total_time": 1000,
            "finish_reason": finish,
        },
    }
    record.update(changes)
    return copy.deepcopy(record)


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def test_it_imports_gold_and_builds_the_screening_set(tmp_path):
    g = make_generation()
    with_error, without = make_task(generation=g), make_task(generation=g)
    path = _write(
        tmp_path / "gold.jsonl",
        [
            _record(with_error.solution.problem.problem, STEPS, [1, 0, -1], "found_error"),
            _record(without.solution.problem.problem, STEPS, [1, 1, 1, 1, 1], "solution"),
        ],
    )
    call_command("import_gold", str(path), "--screening", "--no-progress")
    assert [r for r in _rows(with_error.solution) if r[1]] == [(2, True, False, False)]
    assert not any(r[1] for r in _rows(without.solution))
    screening = list(Task.objects.filter(kind=TaskKind.SCREENING).order_by("-priority", "pk"))
    assert [t.solution_id for t in screening] == [with_error.solution_id, without.solution_id]
    assert {t.generation.number for t in screening} == {-1}


def test_it_imports_nothing_when_one_line_is_bad(tmp_path):
    g = make_generation()
    good, other = make_task(generation=g), make_task(generation=g)
    path = _write(
        tmp_path / "gold.jsonl",
        [
            _record(good.solution.problem.problem, STEPS, [1, 0, -1], "found_error"),
            _record(other.solution.problem.problem, STEPS, [1, 0], "give_up"),
        ],
    )
    with pytest.raises(CommandError, match=r"(?s)gold.jsonl:2: label.finish_reason: .*Nothing was written"):
        call_command("import_gold", str(path), "--no-progress")
    assert not GoldStep.objects.exists()


def test_it_names_a_solution_that_is_not_in_the_database(tmp_path):
    path = _write(tmp_path / "gold.jsonl", [_record("An unknown problem.", STEPS, [1, -1], "found_error")])
    with pytest.raises(CommandError, match=r"gold.jsonl:1: question.pre_generated_steps: no solution"):
        call_command("import_gold", str(path), "--no-progress")


def test_it_adds_imported_gold_to_a_generations_qc_pool(tmp_path):
    g = make_generation()
    task = make_task(generation=g)
    path = _write(tmp_path / "gold.jsonl", [_record(task.solution.problem.problem, STEPS, [1, -1], "found_error")])
    call_command("import_gold", str(path), "--quality-control", str(g.number), "--no-progress")
    qc = Task.objects.get(kind=TaskKind.QUALITY_CONTROL)
    assert (qc.generation_id, qc.solution_id, qc.is_quality_control) == (g.pk, task.solution_id, True)
