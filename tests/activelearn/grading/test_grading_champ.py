"""Grading against hand-checked verdicts on real model solutions (CHAMP).

``data/champ_correct_verdicts.jsonl``: "correct" verdicts drawn at random (100 per seed)
from grading every solution ``load_demo --all`` loads, each read by hand against the
problem and its reference answer. ``verdict`` is whether the solution's final answer is
right; ``answer`` is what the grader had extracted when the row was drawn; ``reason``
explains the verdicts that are not obvious. The solution text is read from the
champ-dataset package, so the whole path (splitting, extraction, comparison) is tested.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activelearn.grading import grade_in_process
from labeling.data import demo

TABLE = Path(__file__).parents[1] / "data" / "champ_correct_verdicts.jsonl"


def rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in TABLE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def solutions() -> dict[tuple[str, str], demo.DemoSolution]:
    return {
        (problem.unique_id.removeprefix(demo.UNIQUE_ID_PREFIX), s.conversation): s
        for problem in demo.read_champ(solutions_per_problem=None)
        for s in problem.solutions
    }


def test_the_table_is_a_hand_checked_random_sample():
    table = rows()
    samples = {row["sample"] for row in table}
    assert len(samples) >= 1 and all(sum(r["sample"] == s for r in table) == 100 for s in samples)
    assert len({(r["problem_id"], r["conversation"]) for r in table}) == len(table)  # no solution drawn twice
    assert all(row["verdict"] in ("correct", "wrong") for row in table)
    assert all(row["reason"] for row in table if row["verdict"] == "wrong")


def test_the_grader_agrees_with_every_hand_verdict_and_its_precision_is_at_least_98_percent(solutions):
    disagreements = []
    graded_correct = right = 0
    for row in rows():
        solution = solutions[(row["problem_id"], row["conversation"])]
        assert solution.final_answer is not None, row
        correct = grade_in_process(solution.final_answer, row["reference"]).correct
        if correct:
            graded_correct += 1
            right += row["verdict"] == "correct"
        if correct != (row["verdict"] == "correct"):
            disagreements.append((row["problem_id"], row["conversation"], solution.final_answer, row["verdict"]))
    assert not disagreements
    assert right / graded_correct >= 0.98
