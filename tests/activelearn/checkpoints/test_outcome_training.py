"""Outcome labels from graded solutions: the ORM checkpoint and a PRM's extra labels."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from activelearn.checkpoints.runs import checkpoint_aggregation, checkpoint_create, checkpoint_training_set
from activelearn.checkpoints.training_data import OutcomeDataFilters, OutcomeSelectionError, outcome_solutions_list
from activelearn.generations.config import GenerationConfigError
from activelearn.generations.pipeline import generation_start
from activelearn.generations.steps import generation_prepare
from activelearn.models import CheckpointObjective, CheckpointStatus, GenerationRun, PRMCheckpoint, SolutionScore
from labeling.models import Generation, Problem, Solution
from tests.activelearn.label_factories import FILLER, keyword_labels, problem, solution
from tests.labeling.admin_factories import make_staff

pytestmark = pytest.mark.django_db

TINY = ["--backbone=tiny:bert", "--learning-rate=1e-2", "--batch-size=8", "--max-length=64", "--seed=1"]


@pytest.fixture
def checkpoint_dir(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    return settings.CHECKPOINT_DIR


def graded(count: int, *, split: str, seed: int, per_problem: int = 2) -> list[Solution]:
    """Solutions of problems in ``split`` whose final step says whether the answer is right,
    graded accordingly (what a tiny model can learn from the verdict alone)."""
    rng = random.Random(seed)
    made: list[Solution] = []
    while len(made) < count:
        of = problem()
        Problem.objects.filter(pk=of.pk).update(split=split)
        for _ in range(per_problem):
            correct = rng.random() < 0.5
            steps = [" ".join(rng.sample(FILLER, 4)), "so the answer is " + ("correct" if correct else "wrong")]
            made.append(solution(of=of, steps=steps))
            Solution.objects.filter(pk=made[-1].pk).update(is_correct=correct, grading_note="correct")
    return made[:count]


def test_the_selector_reads_graded_solutions_of_the_given_splits_and_nothing_else():
    train = graded(6, split="train", seed=1)
    graded(4, split="test", seed=2)
    graded(2, split="validation", seed=3)
    solution(of=train[0].problem, steps=["no verdict yet"])  # never graded
    no_answer = solution(of=train[0].problem, steps=["no answer here"])
    Solution.objects.filter(pk=no_answer.pk).update(grading_note="no answer found")
    placeholder = solution(of=train[0].problem, steps=None)
    Solution.objects.filter(pk=placeholder.pk).update(is_correct=True)
    empty = solution(of=train[0].problem, steps=[])
    Solution.objects.filter(pk=empty.pk).update(is_correct=True)
    keyword_labels(2, seed=4)  # human labels of unsplit problems: never read

    with CaptureQueriesContext(connection) as queries:
        found = outcome_solutions_list(filters=OutcomeDataFilters(splits=("train",)))
    assert sorted(s.problem_id for s in found) == sorted(s.problem.unique_id for s in train)
    by_text = {s.steps[-1]: s.correct for s in found}
    for item in train:
        final = str(list(item.steps or [""])[-1])
        assert by_text[final] == final.endswith("correct")
    # Only solutions and problems are read: no assignment, step or rating table.
    sql = " ".join(q["sql"].lower() for q in queries.captured_queries)
    assert "labeling_solution" in sql
    assert not any(table in sql for table in ("assignment", "labeledstep", "steprating"))


def test_the_selector_draws_a_seeded_uniform_sample_of_the_requested_size():
    made = graded(20, split="train", seed=5)
    filters = OutcomeDataFilters(splits=("train",), count=7, seed=3)
    first = outcome_solutions_list(filters=filters)
    assert len(first) == 7 and first == outcome_solutions_list(filters=filters)
    other = outcome_solutions_list(filters=OutcomeDataFilters(splits=("train",), count=7, seed=4))
    assert [s.steps for s in first] != [s.steps for s in other]
    # More than there are: all of them.
    assert len(outcome_solutions_list(filters=OutcomeDataFilters(splits=("train",), count=50))) == len(made)
    only = made[0].problem.unique_id
    assert {s.problem_id for s in outcome_solutions_list(filters=OutcomeDataFilters(problem_ids=(only,)))} == {only}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "need splits or problem ids"),
        ({"splits": ("train",), "count": 0}, "at least 1"),
    ],
)
def test_the_selector_refuses_a_selection_that_could_read_held_out_problems_or_nothing(kwargs, message):
    with pytest.raises(OutcomeSelectionError, match=message):
        OutcomeDataFilters(**kwargs)


def test_train_prm_objective_outcome_trains_an_orm_checkpoint_scored_at_the_last_step(checkpoint_dir, capsys):
    train = graded(32, split="train", seed=6)
    graded(8, split="validation", seed=7)
    test = graded(6, split="test", seed=8)
    call_command(
        "train_prm", *TINY, "--epochs=3", "--objective=outcome", "--split=train", "--validation-split=validation",
        "--outcome-solutions=24", "--outcome-seed=2", "--no-progress",
    )  # fmt: skip
    checkpoint = PRMCheckpoint.objects.get()
    assert checkpoint.status == CheckpointStatus.READY
    assert checkpoint.objective == CheckpointObjective.OUTCOME and checkpoint.get_objective_display() == "ORM"
    assert checkpoint_aggregation(checkpoint=checkpoint) == "last" and checkpoint.aggregation == "last"
    assert checkpoint.threshold is None
    assert checkpoint.hyperparameters["outcome_data"] == {
        "splits": ["train"],
        "problem_ids": None,
        "generations": None,
        "count": 24,
        "seed": 2,
    }
    assert checkpoint.hyperparameters["resolved"]["objective"] == "outcome"
    metrics = checkpoint.metrics
    assert metrics["train_outcome_solutions"] == 24 and metrics["validation_outcome_solutions"] == 8
    assert metrics["train_outcome_labels"] == 24 and metrics["train_human_labels"] == 0
    assert metrics["train_solutions"] == 0 and metrics["val_labeled_steps"] == 8
    assert json.loads((Path(checkpoint.path) / "prm_config.json").read_text())["objective"] == "outcome"
    assert f"ORM checkpoint {checkpoint.pk} ready" in capsys.readouterr().out
    # Its training set is rebuilt from the row: the same draw, never a held-out problem.
    rebuilt = checkpoint_training_set(checkpoint=checkpoint)
    assert len(rebuilt.outcome_train) == 24 and not rebuilt.train and not rebuilt.validation
    assert {s.problem_id for s in rebuilt.outcome_train} <= {s.problem.unique_id for s in train}

    call_command("score_solutions", "--no-progress", f"--checkpoint={checkpoint.pk}", "--split=test")
    rows = SolutionScore.objects.filter(checkpoint=checkpoint)
    assert rows.count() == len(test)
    for row in rows:
        assert row.reduction == "last" and row.score == pytest.approx(row.step_scores[-1])


def test_a_process_run_takes_graded_solutions_as_weighted_outcome_labels_beside_the_human_ones(checkpoint_dir):
    built = keyword_labels(12, seed=9)
    Problem.objects.filter(pk__in=[b.problem.pk for b in built[:9]]).update(split="train")
    Problem.objects.filter(pk__in=[b.problem.pk for b in built[9:]]).update(split="validation")
    graded(10, split="train", seed=10)
    graded(4, split="validation", seed=11)
    call_command(
        "train_prm", *TINY, "--epochs=1", "--split=train", "--validation-split=validation", "--outcome-weight=0.5",
        "--outcome-targets=every_step", "--no-progress",
    )  # fmt: skip
    checkpoint = PRMCheckpoint.objects.get()
    assert checkpoint.objective == CheckpointObjective.PROCESS and checkpoint.get_objective_display() == "PRM"
    metrics = checkpoint.metrics
    # 9 human-labeled solutions of 3 steps; 10 graded ones of 2 steps, every step labeled.
    assert metrics["train_solutions"] == 9 and metrics["train_human_labels"] == 27
    assert metrics["train_outcome_solutions"] == 10 and metrics["train_outcome_labels"] == 10 * 2
    assert metrics["validation_outcome_solutions"] == 0 and metrics["validation_solutions"] == 3
    resolved = checkpoint.hyperparameters["resolved"]
    assert (resolved["outcome_weight"], resolved["outcome_targets"], resolved["objective"]) == (
        0.5,
        "every_step",
        "process",
    )
    assert checkpoint_aggregation(checkpoint=checkpoint) == (checkpoint.aggregation or "min")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--objective=outcome"], "outcome labels need --split or --problem"),
        (["--outcome-weight=0.5"], "outcome labels need --split or --problem"),
        (["--objective=outcome", "--split=train", "--outcome-weight=2"], "--outcome-weight: for a process run"),
        (["--objective=outcome", "--split=train", "--outcome-solutions=0"], "at least 1"),
        (["--objective=outcome", "--split=train"], "no graded solutions with steps to train on"),
        (
            ["--objective=outcome", "--split=train", "--validation-split=train"],
            "in both the outcome training and the outcome validation solutions",
        ),
    ],
)
def test_train_prm_refuses_outcome_requests_it_cannot_honour(checkpoint_dir, arguments, message):
    if "--validation-split=train" in arguments:
        graded(2, split="train", seed=12)
    with pytest.raises(CommandError, match=message):
        call_command("train_prm", "--backbone=tiny:bert", "--no-progress", *arguments)
    assert not PRMCheckpoint.objects.exists()


@pytest.mark.parametrize(
    ("config", "outcome", "message"),
    [
        ({"objective": "outcome"}, None, r"needs graded solutions to train on \(outcome_filters\)"),
        ({"objective": "reward"}, None, "objective must be one of process, outcome"),
        ({"outcome_weight": 0.5}, None, "outcome_weight given without outcome solutions"),
        (
            {"objective": "outcome", "outcome_targets": "final"},
            OutcomeDataFilters(splits=("train",)),
            "an ORM has no human label",
        ),
    ],
)
def test_checkpoint_create_refuses_an_objective_without_fitting_outcome_data(config, outcome, message):
    with pytest.raises(ValueError, match=message):
        checkpoint_create(base_model="tiny:bert", through_generation=None, config=config, outcome_filters=outcome)
    assert not PRMCheckpoint.objects.exists()


def test_the_database_refuses_an_unknown_checkpoint_objective():
    with pytest.raises(IntegrityError, match="prm_checkpoint_objective_known"), transaction.atomic():
        PRMCheckpoint.objects.create(base_model="tiny:bert", objective="reward")
    checkpoint = PRMCheckpoint.objects.create(base_model="tiny:bert")
    assert checkpoint.objective == CheckpointObjective.PROCESS
    assert checkpoint_aggregation(checkpoint=checkpoint) == "min"


def test_the_pipeline_never_selects_with_an_orm_it_was_not_told_to_use():
    prm = PRMCheckpoint.objects.create(base_model="tiny:bert", status=CheckpointStatus.READY, path="/prm")
    orm = PRMCheckpoint.objects.create(
        base_model="tiny:bert", objective=CheckpointObjective.OUTCOME, status=CheckpointStatus.READY, path="/orm"
    )
    with pytest.raises(GenerationConfigError, match=rf"newest READY checkpoint \({orm.pk}\) is an outcome-supervised"):
        generation_start(config={"retrain": False, "k": 2})
    with pytest.raises(GenerationConfigError, match="objective: a generation trains a PRM on human labels"):
        generation_start(config={"training": {"objective": "outcome"}})
    with pytest.raises(GenerationConfigError, match="outcome_weight: a generation trains a PRM on human labels"):
        generation_start(config={"training": {"outcome_weight": 0.5}})
    assert not Generation.objects.exists()

    # Named, either kind is used.
    for checkpoint in (prm, orm):
        generation = generation_start(config={"retrain": False, "k": 2, "checkpoint_id": checkpoint.pk})
        generation_prepare(generation_id=generation.pk)
        assert GenerationRun.objects.get(generation=generation).checkpoint == checkpoint
        Generation.objects.filter(pk=generation.pk).update(status="closed")


def test_the_admin_and_the_dashboard_show_each_checkpoints_kind_side_by_side():
    PRMCheckpoint.objects.create(base_model="tiny:bert", status=CheckpointStatus.READY, path="/prm")
    orm = PRMCheckpoint.objects.create(
        base_model="tiny:bert",
        objective=CheckpointObjective.OUTCOME,
        status=CheckpointStatus.READY,
        path="/orm",
        metrics={"val_auroc": 0.8, "train_outcome_solutions": 24},
    )
    staff = Client()
    staff.force_login(make_staff())
    listing = staff.get(reverse("admin:activelearn_prmcheckpoint_changelist")).content.decode()
    assert '<td class="field-objective">ORM</td>' in listing and '<td class="field-objective">PRM</td>' in listing
    page = staff.get(reverse("admin:activelearn_prmcheckpoint_change", args=[orm.pk])).content.decode()
    assert "ORM" in page
    dashboard = staff.get("/dashboard/").content.decode()
    assert f"#{orm.pk} ORM" in dashboard and "graded solutions (outcome labels)" in dashboard
    assert ">ORM</td>" in dashboard and ">PRM</td>" in dashboard
