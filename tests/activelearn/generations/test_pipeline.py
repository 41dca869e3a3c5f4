"""The generation state machine and its steps, run in this process (no worker)."""

from collections.abc import Hashable
from datetime import timedelta
from typing import cast

import pytest
from django.utils import timezone

from activelearn.generations import machine, pipeline, steps
from activelearn.generations.config import (
    GenerationConfig,
    GenerationConfigError,
    GenerationRunningError,
    GenerationStateError,
)
from activelearn.generations.machine import generation_transition
from activelearn.generations.pipeline import generation_close, generation_retry, generation_start
from activelearn.generations.pool import score_chunks_create
from activelearn.models import CheckpointStatus, GenerationRun, PRMCheckpoint, ScoreChunk, SolutionScore
from labeling.models import Generation, GenerationStatus, Solution, Task, TaskKind
from tests.activelearn.label_factories import Step, labeled
from tests.activelearn.pipeline_factories import config, drive, labels, pool, queued

S = GenerationStatus


@pytest.fixture(autouse=True)
def pipeline_settings(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    settings.PIPELINE_GPU_QUEUE = "test-gpu"
    settings.PIPELINE_CPU_QUEUE = "test-cpu"
    settings.PIPELINE_SCORE_CHUNK_SIZE = 5


@pytest.mark.django_db
def test_it_starts_a_requested_generation_and_queues_its_first_step_after_commit(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        generation = generation_start(config=config(k=3))

    assert (generation.number, generation.status) == (0, S.REQUESTED)
    assert generation.run.config["k"] == 3
    assert generation.run.config["base_model"] == "tiny:bert"
    assert generation.config == generation.run.config
    assert queued(callbacks) == [("generation_prepare_task", (generation.pk,), "test-cpu")]


@pytest.mark.django_db
def test_it_numbers_a_generation_after_the_highest_one():
    Generation.objects.create(number=4, status=S.OPEN)

    assert generation_start(config=config()).number == 5


@pytest.mark.django_db
def test_it_refuses_a_second_start_while_one_runs():
    first = generation_start(config=config())

    with pytest.raises(GenerationRunningError, match="generation 0"):
        generation_start(config=config())
    with pytest.raises(GenerationRunningError):
        generation_start(number=first.number, config=config())
    assert Generation.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"k": 0}, "k must"),
        ({"wrong_share": 1.5}, "wrong_share"),
        ({"shots": 3}, "unknown generation option"),
        ({"training": {"epochz": 1}}, "unknown training option"),
        ({"qc_items": 10_000}, "qc_items"),
        ({"retrain": False}, "not READY"),
        ({"base_model": "/nowhere/model"}, "does not exist"),
        ({"k": 10**30}, r"k must be an integer in \[1, 1,000,000\]"),
        ({"k": 1e20}, "k must be an integer"),
        ({"per_problem_cap": 3_000_000_000}, "per_problem_cap"),
        ({"retrain": False, "checkpoint_id": 10**20}, "checkpoint_id must be an integer in"),
        ({"through_generation": 10**20}, "through_generation"),
        ({"score_batch_size": 10**9}, "score_batch_size"),
    ],
)
def test_it_rejects_a_bad_config_before_creating_anything(bad, message):
    with pytest.raises(GenerationConfigError, match=message):
        generation_start(config=config(**bad))
    assert not Generation.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("number", [3_000_000_000, 10**20, -1])
def test_it_refuses_a_generation_number_the_database_cannot_hold(number):
    with pytest.raises(
        GenerationConfigError, match=rf"generation number must be an integer in \[0, 2147483647\], not {number}"
    ):
        generation_start(number=number, config=config())
    assert not Generation.objects.exists()


@pytest.mark.django_db
def test_a_retrained_checkpoint_names_the_newest_generation_whose_labels_it_sees():
    Generation.objects.create(number=4, status=S.CLOSED)
    generation = generation_start(config=config())

    steps.generation_prepare(generation_id=generation.pk)

    generation.refresh_from_db()
    assert generation.run.checkpoint.trained_through_generation == 4


def test_the_config_round_trips_through_json():
    original = GenerationConfig(k=5, per_problem=True, problem_ids=("a", "b"), training={"max_steps": 1})

    assert GenerationConfig.from_json(original.to_json()) == original


@pytest.mark.django_db
def test_a_transition_happens_only_from_the_status_it_names():
    generation = generation_start(config=config())

    assert not generation_transition(generation_id=generation.pk, from_=S.TRAINING, to=S.SCORING)
    assert generation_transition(generation_id=generation.pk, from_=S.REQUESTED, to=S.TRAINING)
    with pytest.raises(GenerationStateError):
        generation_transition(generation_id=generation.pk, from_=S.TRAINING, to=S.OPEN)
    generation.refresh_from_db()
    assert generation.status == S.TRAINING
    assert generation.run.step == S.TRAINING
    assert generation.run.training_started_at is not None


@pytest.mark.django_db
@pytest.mark.slow
def test_a_generation_runs_from_the_pool_to_open_tasks_in_queue_order(django_capture_on_commit_callbacks):
    labels()
    solutions = pool(problems=3, per_problem=6)
    generation = generation_start(config=config(k=6))

    with django_capture_on_commit_callbacks() as callbacks:
        generation = drive(generation)

    run = GenerationRun.objects.get(generation=generation)
    assert generation.status == S.OPEN, generation.error
    assert run.checkpoint is not None and run.checkpoint.status == CheckpointStatus.READY
    assert (run.scored, run.score_total, run.graded, run.grade_total) == (18, 18, 18, 18)
    assert run.selected == 6
    assert ScoreChunk.objects.filter(run=run).count() == 4  # 18 solutions in chunks of 5
    assert all(s.is_correct is not None for s in Solution.objects.filter(pk__in=[s.pk for s in solutions]))
    tasks = list(Task.objects.filter(generation=generation))
    scores = dict(SolutionScore.objects.filter(checkpoint=run.checkpoint).values_list("solution_id", "score"))
    assert len(tasks) == 6
    assert all(t.verifier_score == scores[t.solution_id] for t in tasks)
    # The queue's priorities are the picks' scores, handed out along the serving order.
    assert all(t.verifier_score is not None for t in tasks)
    assert sorted(t.priority for t in tasks) == sorted(float(t.verifier_score or 0.0) for t in tasks)
    wrong = {s.pk for s in Solution.objects.filter(pk__in=scores, is_correct=False)}
    wrong_scores = sorted((scores[i] for i in wrong), reverse=True)
    picked_wrong = sorted((float(t.verifier_score or 0.0) for t in tasks if t.solution_id in wrong), reverse=True)
    assert picked_wrong == wrong_scores[: len(picked_wrong)]
    assert run.selection_stats["wrong_answer_picks"] == min(len(wrong), 5)  # round(6 * 0.8)
    assert all(getattr(run, f"{step}_finished_at") for step in ("training", "scoring", "grading", "selecting"))
    names = [name for name, _, _ in queued(callbacks)]
    assert names[0] == "generation_train_task"
    assert names.count("generation_score_chunk_task") == 4
    assert names[-2:] == ["generation_grade_task", "generation_select_task"]
    assert {queue for name, _, queue in queued(callbacks) if "train" in name or "chunk" in name} == {"test-gpu"}


@pytest.mark.django_db
@pytest.mark.slow
def test_running_every_step_again_changes_nothing(settings):
    labels()
    pool(problems=2, per_problem=5)
    generation = drive(generation_start(config=config(k=4)))
    run = generation.run
    before = (
        PRMCheckpoint.objects.count(),
        sorted(SolutionScore.objects.values_list("solution_id", "checkpoint_id", "score")),
        sorted(Task.objects.values_list("generation_id", "solution_id", "priority")),
    )
    # As if every worker had died and every message were delivered again.
    GenerationRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(days=1))

    steps.generation_prepare(generation_id=generation.pk)
    steps.generation_train(generation_id=generation.pk)
    for chunk in ScoreChunk.objects.filter(run=run):
        assert steps.score_chunk_run(chunk_id=chunk.pk) == 0
    assert score_chunks_create(run=run) == ScoreChunk.objects.filter(run=run).count()
    assert steps.generation_grade(generation_id=generation.pk) == 0
    assert steps.generation_select(generation_id=generation.pk) == 0

    after = (
        PRMCheckpoint.objects.count(),
        sorted(SolutionScore.objects.values_list("solution_id", "checkpoint_id", "score")),
        sorted(Task.objects.values_list("generation_id", "solution_id", "priority")),
    )
    assert after == before
    assert Generation.objects.get(pk=generation.pk).status == S.OPEN


@pytest.mark.django_db
def test_a_redelivered_prepare_creates_one_checkpoint():
    labels(2)
    generation = generation_start(config=config())
    steps.generation_prepare(generation_id=generation.pk)
    # The same step again, its claim taken over after the first worker "died".
    Generation.objects.filter(pk=generation.pk).update(status=S.REQUESTED)
    GenerationRun.objects.filter(generation=generation).update(heartbeat_at=timezone.now() - timedelta(days=1))

    steps.generation_prepare(generation_id=generation.pk)

    assert PRMCheckpoint.objects.count() == 1


@pytest.mark.django_db
def test_a_chunk_claimed_by_a_live_worker_is_not_taken_by_another():
    labels(2)
    pool(problems=1, per_problem=3)
    checkpoint = PRMCheckpoint.objects.create(base_model="tiny:bert", status=CheckpointStatus.READY, path="/x")
    generation = generation_start(config={"retrain": False, "k": 2})
    steps.generation_prepare(generation_id=generation.pk)
    chunk = ScoreChunk.objects.get(run__generation=generation)
    ScoreChunk.objects.filter(pk=chunk.pk).update(status="running", heartbeat_at=timezone.now())

    assert steps.score_chunk_run(chunk_id=chunk.pk) == 0
    assert not SolutionScore.objects.filter(checkpoint=checkpoint).exists()


@pytest.mark.django_db
@pytest.mark.slow
def test_a_failed_step_shows_its_error_and_a_retry_resumes_it(django_capture_on_commit_callbacks):
    pool(problems=2, per_problem=4)
    generation = generation_start(config=config(k=3))
    steps.generation_prepare(generation_id=generation.pk)

    # No labels at all: training fails.
    with pytest.raises(ValueError, match="no labeled solutions"):
        steps.generation_train(generation_id=generation.pk)

    generation.refresh_from_db()
    assert generation.status == S.FAILED
    assert "training: NoTrainingDataError" in generation.error
    assert generation.run.error == generation.error
    checkpoint = generation.run.checkpoint
    assert checkpoint is not None and checkpoint.status == CheckpointStatus.FAILED

    labels()
    with django_capture_on_commit_callbacks() as callbacks:
        generation = generation_retry(generation_id=generation.pk)
    assert (generation.status, generation.error, generation.run.retries) == (S.TRAINING, "", 1)
    assert [name for name, _, _ in queued(callbacks)] == ["generation_train_task"]

    generation = drive(generation)
    assert generation.status == S.OPEN
    assert PRMCheckpoint.objects.count() == 1  # the same checkpoint, trained on retry
    assert Task.objects.filter(generation=generation).count() == 3


@pytest.mark.django_db
def test_retry_and_close_refuse_the_wrong_status():
    generation = generation_start(config=config())

    with pytest.raises(GenerationStateError):
        generation_retry(generation_id=generation.pk)
    with pytest.raises(GenerationStateError):
        generation_close(generation_id=generation.pk)


@pytest.mark.django_db
def test_a_retry_cannot_run_beside_another_running_generation():
    failed = generation_start(config=config())
    machine.generation_fail(generation_id=failed.pk, error="boom")
    generation_start(config=config())

    with pytest.raises(GenerationRunningError):
        generation_retry(generation_id=failed.pk)
    assert Generation.objects.get(pk=failed.pk).status == S.FAILED


@pytest.mark.django_db
def test_closing_an_open_generation_stops_it_being_served():
    generation = Generation.objects.create(number=0, status=S.OPEN)

    closed = generation_close(generation_id=generation.pk)

    assert closed.status == S.CLOSED
    assert closed.finished_at is not None


@pytest.mark.django_db
@pytest.mark.slow
def test_selection_reuses_a_checkpoint_and_never_picks_what_was_labeled():
    labels()
    solutions = pool(problems=2, per_problem=5, wrong_rate=1.0)
    first = drive(generation_start(config=config(k=3)))
    # A solution labeled before, under another row with the same content.
    labeled_before = solutions[-1]
    Solution.objects.create(
        problem=labeled_before.problem,
        steps=labeled_before.steps,
        content_sha256=labeled_before.content_sha256,
        source_model="elsewhere",
    )
    twin = Solution.objects.get(source_model="elsewhere")
    labeled_first = labeled([Step(completions=[("x", 1)])])
    Task.objects.filter(pk=labeled_first.assignment.task_id).update(solution=twin)
    pipeline.generation_close(generation_id=first.pk)

    second = drive(generation_start(config=config(k=100, retrain=False, training={})))

    assert second.run.checkpoint_id == first.run.checkpoint_id
    assert second.run.training_started_at is None
    picked_first = set(Task.objects.filter(generation=first).values_list("solution_id", flat=True))
    picked_second = set(Task.objects.filter(generation=second).values_list("solution_id", flat=True))
    assert not picked_first & picked_second
    assert labeled_before.pk not in picked_second
    assert twin.pk not in picked_second
    assert {s.pk for s in solutions} - {labeled_before.pk} <= picked_first | picked_second, (twin.pk, picked_second)
    assert Task.objects.filter(generation=second, kind=TaskKind.NORMAL).count() == len(picked_second)


@pytest.mark.django_db
def test_the_start_command_passes_its_flags_as_the_config():
    from django.core.management import call_command

    call_command(
        "start_generation", "--k", "7", "--per-problem", "--base-model", "tiny:bert", "--train-option", "max_steps=2"
    )

    run = GenerationRun.objects.get()
    assert (run.config["k"], run.config["per_problem"], run.config["training"]) == (7, True, {"max_steps": 2})


@pytest.mark.django_db
def test_the_start_command_reports_a_refusal_as_a_command_error():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="k must"):
        call_command("start_generation", "--k", "0")
    with pytest.raises(CommandError, match="generation number must be an integer"):
        call_command("start_generation", "--number", "3000000000", "--base-model", "tiny:bert")
    assert not Generation.objects.exists()


def test_the_campaign_command_writes_its_report_into_the_docs(settings, tmp_path):
    from activelearn.management.commands.simulate_campaign import Command

    settings.BASE_DIR = tmp_path
    (tmp_path / "docs" / "img").mkdir(parents=True)
    (tmp_path / "docs" / "active-learning.md").write_text("# Active learning\n")
    report = tmp_path / "report"
    report.mkdir()
    (report / "campaign.md").write_text("| strategy | f1 |\n")
    (report / "campaign.png").write_bytes(b"\x89PNG fake")

    Command()._write_docs(report)
    Command()._write_docs(report)  # replaces its own section

    text = (tmp_path / "docs" / "active-learning.md").read_text()
    assert text.count("| strategy | f1 |") == 1
    assert (tmp_path / "docs" / "img" / "campaign.png").read_bytes() == b"\x89PNG fake"
    assert "](img/campaign.png)" in text


def test_a_study_in_another_domain_gets_its_own_block_beside_the_default_studys(settings, tmp_path):
    from django.core.management.base import CommandError

    from activelearn.management.commands.simulate_campaign import Command, _domain

    settings.BASE_DIR = tmp_path
    (tmp_path / "docs" / "img").mkdir(parents=True)
    (tmp_path / "docs" / "active-learning.md").write_text("# Active learning\n")
    for name, table in (("default", "| default study |\n"), ("misconceptions", "| misconceptions study |\n")):
        report = tmp_path / name
        report.mkdir()
        (report / "study.md").write_text(table)
        (report / "study.png").write_bytes(name.encode())
    Command()._write_docs(tmp_path / "default", "study")
    other = _domain(["--domain", "misconceptions"])
    Command()._write_docs(tmp_path / "misconceptions", "study", block=f"study-{other}")
    text = (tmp_path / "docs" / "active-learning.md").read_text()
    assert "| default study |" in text and "| misconceptions study |" in text
    assert (tmp_path / "docs" / "img" / "study-misconceptions.png").read_bytes() == b"misconceptions"
    # The default domain (home), named or not, writes the study's own block.
    assert (_domain(["--domain=home"]), _domain(["--seeds", "1"])) == (None, None)
    with pytest.raises(CommandError, match=r"no place in docs/active-learning\.md for a study-moon report"):
        Command()._write_docs(tmp_path / "misconceptions", "study", block="study-moon")


@pytest.mark.django_db
def test_a_generation_scores_with_the_aggregation_and_threshold_its_checkpoint_chose():
    labels()
    pool(problems=2, per_problem=4, wrong_rate=1.0)
    first = drive(generation_start(config=config(k=2)))
    assert first.run.checkpoint_id is not None
    checkpoint = PRMCheckpoint.objects.get(pk=first.run.checkpoint_id)
    pipeline.generation_close(generation_id=first.pk)
    # Pretend validation chose "last" and a threshold every step passes.
    PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(aggregation="last", threshold=0.0)
    SolutionScore.objects.filter(checkpoint=checkpoint).delete()

    second = drive(generation_start(config=config(k=2, retrain=False, training={})))

    rows = SolutionScore.objects.filter(checkpoint=checkpoint)
    assert rows.exists() and set(rows.values_list("reduction", flat=True)) == {"last"}
    assert all(row.score == pytest.approx(row.step_scores[-1]) for row in rows)
    stats = GenerationRun.objects.get(generation=second).selection_stats
    # Every wrong-answer pick passes a threshold of 0: the checkpoint flags nothing.
    assert stats["wrong_answer_picks_passing_threshold"] == stats["wrong_answer_picks"] > 0
    # With the checkpoint's threshold falling along a solution, a candidate passes by the
    # same rule its first errors were chosen by: a steep fall spares every step but the first.
    run = GenerationRun.objects.get(generation=second)
    low_later, low_first = sorted(cast(int, c.solution_id) for c in steps.selection_candidates(run=run))[:2]
    rows.filter(solution_id=low_later).update(step_scores=[0.9, 0.3, 0.8])
    rows.filter(solution_id=low_first).update(step_scores=[0.3, 0.9])

    def passes() -> dict[Hashable, bool | None]:
        fresh = GenerationRun.objects.get(pk=run.pk)  # the checkpoint's row as it is now
        found = {c.solution_id: c.passes for c in steps.selection_candidates(run=fresh)}
        return {solution: found[solution] for solution in (low_later, low_first)}

    PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(threshold=0.5, calibration={"threshold_decay": 0.0})
    assert passes() == {low_later: False, low_first: False}
    PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(calibration={"threshold_decay": 1000.0})
    assert passes() == {low_later: True, low_first: False}
