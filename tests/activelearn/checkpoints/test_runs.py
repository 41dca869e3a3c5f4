import dataclasses
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from activelearn.checkpoints.runs import (
    STEP_FEATURE_NAMES,
    TRAIN_CONFIG_KEYS,
    CheckpointStoppedError,
    NoTrainingDataError,
    checkpoint_create,
    checkpoint_run,
    checkpoint_train,
    checkpoint_transition,
)
from activelearn.checkpoints.scoring import solutions_score, solutions_score_range
from activelearn.models import CheckpointStatus, PRMCheckpoint, SolutionScore
from activelearn.prm.modeling import STEP_FEATURES, ProcessRewardModel
from activelearn.prm.recipes import AGGREGATIONS, CHOOSE_AGGREGATION
from activelearn.prm.scoring import REDUCTIONS, score_solutions
from activelearn.prm.training import ForeignRunError, TrainConfig, output_dir_claim
from labeling.models import Problem
from tests.activelearn.label_factories import TINY_CONFIG, keyword_labels, problem, solution

pytestmark = pytest.mark.django_db


@pytest.fixture
def checkpoint_dir(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    return settings.CHECKPOINT_DIR


def test_it_trains_a_checkpoint_end_to_end_through_the_command(checkpoint_dir, capsys):
    keyword_labels(24, seed=1)
    call_command(
        "train_prm", "--backbone=tiny:bert", "--learning-rate=1e-2", "--epochs=2", "--batch-size=8",
        "--max-length=64", "--val-fraction=0.3", "--seed=1", "--no-progress",
    )  # fmt: skip
    checkpoint = PRMCheckpoint.objects.get()
    assert checkpoint.status == CheckpointStatus.READY and checkpoint.error == ""
    assert Path(checkpoint.path) == checkpoint_dir / f"run-{checkpoint.run_id.hex}" / "final"
    assert (Path(checkpoint.path) / "prm_config.json").is_file()
    assert checkpoint.base_model == "tiny:bert" and checkpoint.trained_through_generation is None
    assert checkpoint.hyperparameters["train"]["learning_rate"] == 1e-2
    assert checkpoint.hyperparameters["resolved"]["backbone"] == "tiny:bert"
    metrics = checkpoint.metrics
    assert metrics["train_solutions"] + metrics["validation_solutions"] == 24 and metrics["validation_solutions"] > 0
    assert metrics["val_loss"] is not None and 0 <= metrics["val_accuracy"] <= 1
    assert metrics["optimizer_steps"] == checkpoint.steps_done == checkpoint.steps_total > 0
    assert metrics["train_loss_curve"][-1][0] == metrics["optimizer_steps"]
    assert checkpoint.examples_seen == 2 * metrics["train_solutions"]
    assert (
        checkpoint.heartbeat_at is not None and checkpoint.finished_at is not None and (checkpoint.duration_s or 0) > 0
    )
    assert f"checkpoint {checkpoint.pk} ready" in capsys.readouterr().out


def test_it_refuses_to_train_without_labels(checkpoint_dir):
    with pytest.raises(CommandError, match="no labeled solutions to train on"):
        call_command("train_prm", "--backbone=tiny:bert", "--no-progress")
    assert not PRMCheckpoint.objects.exists()


def test_it_refuses_a_missing_backbone_directory(checkpoint_dir, tmp_path):
    keyword_labels(3, seed=1)
    with pytest.raises(CommandError, match=r"backbone directory .* does not exist"):
        call_command("train_prm", f"--backbone={tmp_path / 'nope'}", "--no-progress")


def test_it_rejects_unknown_checkpoint_ids():
    with pytest.raises(CommandError, match="no checkpoint with id 999"):
        call_command("score_solutions", "--checkpoint=999", "--no-progress")
    with pytest.raises(CommandError, match="no checkpoint with id 999"):
        call_command("evaluate_prm", "--checkpoint=999")
    with pytest.raises(CommandError, match="no checkpoint with id 999"):
        call_command("train_prm", "--resume=999", "--no-progress")


def test_it_only_trains_on_labels_up_to_the_generation_it_is_given(checkpoint_dir):
    keyword_labels(10, seed=2, generation_number=0)
    keyword_labels(10, seed=3, generation_number=1)
    checkpoint = checkpoint_train(base_model="tiny:bert", through_generation=0, config={**TINY_CONFIG, "max_steps": 1})
    assert checkpoint.trained_through_generation == 0
    assert checkpoint.metrics["train_solutions"] + checkpoint.metrics["validation_solutions"] == 10


def test_it_resumes_a_failed_run_from_its_last_saved_step(checkpoint_dir):
    keyword_labels(24, seed=4)
    checkpoint = checkpoint_create(
        base_model="tiny:bert", through_generation=None, config={**TINY_CONFIG, "checkpoint_every": 1}
    )

    class Crash(Exception):
        pass

    def crash_at_two(step, total, loss):
        if step == 2:
            raise Crash("worker died")

    with pytest.raises(Crash):
        checkpoint_run(checkpoint_id=checkpoint.pk, progress=crash_at_two)
    checkpoint.refresh_from_db()
    assert checkpoint.status == CheckpointStatus.FAILED and "worker died" in checkpoint.error
    assert checkpoint.steps_done == 1  # heartbeats record step 1; step 2 crashed before its heartbeat
    assert (Path(checkpoint.output_dir) / "checkpoint-00000002").is_dir()

    resumed = checkpoint_run(checkpoint_id=checkpoint.pk)
    assert resumed.status == CheckpointStatus.READY and resumed.error == ""
    assert resumed.metrics["resumed_from_step"] == 2
    # A second run of a READY checkpoint (a redelivered task) changes nothing.
    assert checkpoint_run(checkpoint_id=checkpoint.pk).finished_at == resumed.finished_at


def _crashed_run(seed: int) -> PRMCheckpoint:
    """A run killed after its second optimizer step: its directory holds checkpoint 2."""
    keyword_labels(24, seed=seed)
    checkpoint = checkpoint_create(
        base_model="tiny:bert", through_generation=None, config={**TINY_CONFIG, "checkpoint_every": 1}
    )

    def crash_at_two(step, total, loss):
        if step == 2:
            raise RuntimeError("worker died")

    with pytest.raises(RuntimeError):
        checkpoint_run(checkpoint_id=checkpoint.pk, progress=crash_at_two)
    checkpoint.refresh_from_db()
    assert (Path(checkpoint.output_dir) / "checkpoint-00000002").is_dir()
    return checkpoint


def _restart_checkpoint_ids(at: int) -> None:
    # What a recreated database (or a restored backup) does: row ids are handed out again,
    # from ``at`` (the old run's id; earlier tests may have moved the sequence past 1).
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT setval(pg_get_serial_sequence('activelearn_prmcheckpoint', 'id'), %s, false)", [at])
        else:
            cursor.execute("UPDATE sqlite_sequence SET seq = %s WHERE name = 'activelearn_prmcheckpoint'", [at - 1])


@pytest.mark.django_db(transaction=True)
def test_it_trains_from_scratch_when_a_recreated_database_reuses_the_row_id(checkpoint_dir):
    old = _crashed_run(seed=11)
    old_files = sorted(p.name for p in Path(old.output_dir).iterdir())
    PRMCheckpoint.objects.all().delete()
    _restart_checkpoint_ids(at=old.pk)

    new = checkpoint_create(
        base_model="tiny:bert", through_generation=None, config={**TINY_CONFIG, "checkpoint_every": 1}
    )
    assert new.pk == old.pk  # the situation: same row id, same CHECKPOINT_DIR
    assert new.output_dir != old.output_dir
    trained = checkpoint_run(checkpoint_id=new.pk)
    assert trained.status == CheckpointStatus.READY
    assert trained.metrics["resumed_from_step"] == 0
    assert trained.steps_done == trained.metrics["optimizer_steps"] > 2
    # The old run's files are left as they were.
    assert sorted(p.name for p in Path(old.output_dir).iterdir()) == old_files


def test_it_refuses_to_resume_from_a_directory_another_run_wrote(checkpoint_dir):
    old = _crashed_run(seed=12)
    old_files = sorted(p.name for p in Path(old.output_dir).iterdir())
    other = checkpoint_create(base_model="tiny:bert", through_generation=None, config=TINY_CONFIG)
    PRMCheckpoint.objects.filter(pk=other.pk).update(output_dir=old.output_dir)

    with pytest.raises(ForeignRunError, match="belongs to training run"):
        checkpoint_run(checkpoint_id=other.pk)
    other.refresh_from_db()
    assert other.status == CheckpointStatus.FAILED and "belongs to training run" in other.error
    assert sorted(p.name for p in Path(old.output_dir).iterdir()) == old_files


def test_it_starts_over_when_the_runs_data_changed_since_its_checkpoints(checkpoint_dir):
    crashed = _crashed_run(seed=13)
    keyword_labels(6, seed=14)  # labels submitted between the crash and the retry
    retried = checkpoint_run(checkpoint_id=crashed.pk)
    assert retried.status == CheckpointStatus.READY
    assert retried.metrics["resumed_from_step"] == 0
    assert retried.metrics["train_solutions"] + retried.metrics["validation_solutions"] == 30


def test_it_refuses_checkpoints_without_a_manifest(tmp_path):
    (tmp_path / "checkpoint-00000004").mkdir()
    with pytest.raises(ForeignRunError, match="without a run manifest"):
        output_dir_claim(tmp_path, {"run_id": "a", "base_model": "tiny:bert", "data_fingerprint": "f"})
    assert (tmp_path / "checkpoint-00000004").is_dir()


def test_it_stops_training_when_the_row_is_failed_from_outside(checkpoint_dir):
    keyword_labels(12, seed=5)
    checkpoint = checkpoint_create(base_model="tiny:bert", through_generation=None, config=TINY_CONFIG)

    def failed_by_reconciler(step, total, loss):
        checkpoint_transition(checkpoint_id=checkpoint.pk, to=CheckpointStatus.FAILED, error="heartbeat lost")

    with pytest.raises(CheckpointStoppedError):
        checkpoint_run(checkpoint_id=checkpoint.pk, progress=failed_by_reconciler)
    checkpoint.refresh_from_db()
    assert checkpoint.status == CheckpointStatus.FAILED and checkpoint.error == "heartbeat lost"


def test_it_never_moves_a_ready_checkpoint():
    checkpoint = PRMCheckpoint.objects.create(base_model="tiny:bert", status=CheckpointStatus.READY, path="/x")
    assert not checkpoint_transition(checkpoint_id=checkpoint.pk, to=CheckpointStatus.FAILED, error="late")
    assert not checkpoint_transition(checkpoint_id=checkpoint.pk, to=CheckpointStatus.TRAINING)
    checkpoint.refresh_from_db()
    assert checkpoint.status == CheckpointStatus.READY and checkpoint.error == ""


def test_it_raises_before_creating_a_row_when_every_label_is_filtered_out(checkpoint_dir):
    keyword_labels(3, seed=1, generation_number=5)
    with pytest.raises(NoTrainingDataError):
        checkpoint_train(base_model="tiny:bert", through_generation=4, config=TINY_CONFIG)
    assert not PRMCheckpoint.objects.exists()


def test_it_allows_exactly_the_train_config_fields_it_can_override():
    fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"output_dir", "backbone"}
    assert fields == TRAIN_CONFIG_KEYS
    assert set(STEP_FEATURES) == STEP_FEATURE_NAMES
    assert (CHOOSE_AGGREGATION, *REDUCTIONS) == AGGREGATIONS


def test_it_refuses_an_unknown_step_feature_before_creating_a_run():
    with pytest.raises(ValueError, match="step_features must be a list of \\['span', 'surprise'\\], got \\['smell'\\]"):
        checkpoint_create(base_model="tiny:llama", through_generation=None, config={"step_features": ["smell"]})
    for layers in (0, "half", True):
        with pytest.raises(ValueError, match=f"backbone_layers must be a whole number of layers >= 1, got {layers!r}"):
            checkpoint_create(base_model="tiny:llama", through_generation=None, config={"backbone_layers": layers})
    for strengths in (0.1, [0.1, 0], ["strong"]):
        with pytest.raises(ValueError, match="head_l2 must be a list of L2 strengths > 0"):
            checkpoint_create(base_model="tiny:llama", through_generation=None, config={"head_l2": strengths})
    for aggregation in ("median", ["mean"]):
        with pytest.raises(ValueError, match=re.escape(f"must be one of {list(AGGREGATIONS)}, got {aggregation!r}")):
            checkpoint_create(base_model="tiny:llama", through_generation=None, config={"aggregation": aggregation})
    for decay in (-0.1, float("nan"), "steep", True):
        with pytest.raises(ValueError, match=re.escape(f"threshold_decay must be a finite number >= 0, got {decay!r}")):
            checkpoint_create(base_model="tiny:llama", through_generation=None, config={"threshold_decay": decay})
        with pytest.raises(ValueError, match="threshold_decay must be a finite number >= 0"):
            TrainConfig(output_dir=Path("unused"), threshold_decay=decay)
    assert not PRMCheckpoint.objects.exists()


@pytest.mark.parametrize("reduction", ["product", "min"])
def test_it_scores_solutions_once_per_checkpoint_with_the_packages_scores(checkpoint_dir, reduction):
    keyword_labels(12, seed=6)
    checkpoint = checkpoint_train(
        base_model="tiny:llama", through_generation=None, config={**TINY_CONFIG, "max_steps": 2}
    )
    the_problem = problem()
    pool = [solution(of=the_problem, steps=[f"step {i} correct", f"then {i} wrong"]) for i in range(5)]
    placeholder = solution(of=the_problem, steps=None)
    ids = [s.pk for s in pool] + [placeholder.pk]

    assert solutions_score(checkpoint=checkpoint, solution_ids=ids, reduction=reduction, batch_size=2) == 5
    assert solutions_score_range(checkpoint=checkpoint, first_id=min(ids), last_id=max(ids), reduction=reduction) == 5
    rows = {row.solution_id: row for row in SolutionScore.objects.filter(checkpoint=checkpoint)}
    assert sorted(rows) == sorted(s.pk for s in pool)

    model, tokenizer = ProcessRewardModel.from_pretrained(checkpoint.path)
    expected = score_solutions(
        model, tokenizer, [(the_problem.problem, list(s.steps or [])) for s in pool], reduction=reduction
    )
    for item, want in zip(pool, expected, strict=True):
        assert rows[item.pk].score == pytest.approx(want.score, abs=1e-5)
        assert rows[item.pk].step_scores == pytest.approx(list(want.step_scores), abs=1e-5)
        assert rows[item.pk].reduction == reduction


def test_the_score_command_scores_the_pool_with_the_newest_ready_checkpoint(checkpoint_dir, capsys):
    keyword_labels(8, seed=7)
    checkpoint = checkpoint_train(
        base_model="tiny:bert", through_generation=None, config={**TINY_CONFIG, "max_steps": 1}
    )
    call_command("score_solutions", "--no-progress", "--chunk=3")
    call_command("score_solutions", "--no-progress", f"--checkpoint={checkpoint.pk}")
    assert SolutionScore.objects.filter(checkpoint=checkpoint).count() == 8
    assert "scored 8 solution(s)" in capsys.readouterr().out


def test_the_score_command_selects_work_by_what_it_is(checkpoint_dir, capsys):
    built = keyword_labels(6, seed=9)
    # Every problem trains: with a hashed split, six counter-named problems can all land in
    # validation, depending on which tests ran before in the process.
    checkpoint = checkpoint_train(
        base_model="tiny:bert", through_generation=None, config={**TINY_CONFIG, "max_steps": 1, "val_fraction": 0.0}
    )
    test_problems = [b.problem for b in built[:2]]
    Problem.objects.filter(pk__in=[p.pk for p in test_problems]).update(split="test")
    extra = solution(of=test_problems[0], steps=["another try correct"])
    call_command("score_solutions", "--no-progress", "--split=test")
    scored = set(SolutionScore.objects.filter(checkpoint=checkpoint).values_list("solution_id", flat=True))
    assert scored == {built[0].solution.pk, built[1].solution.pk, extra.pk}
    # Scored with the checkpoint's chosen aggregation unless told otherwise.
    assert set(SolutionScore.objects.values_list("reduction", flat=True)) == {checkpoint.aggregation or "min"}
    assert f"aggregation {checkpoint.aggregation or 'min'}" in capsys.readouterr().out

    call_command("score_solutions", "--no-progress", "--unscored")
    assert "scored 4 solution(s)" in capsys.readouterr().out  # only the 4 not scored yet
    call_command("score_solutions", "--no-progress", f"--problem={built[5].problem.unique_id}", "--reduction=product")
    assert SolutionScore.objects.get(solution=built[5].solution).reduction == "product"
    call_command("score_solutions", "--no-progress", "--generation=0", "--unscored")
    assert "nothing left to score" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no solutions to score"):
        call_command("score_solutions", "--no-progress", "--split=validation")
