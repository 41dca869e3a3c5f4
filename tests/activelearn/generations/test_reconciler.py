"""The reconciler notices steps whose worker died and re-enqueues them; the cadence starts generations."""

from datetime import timedelta

import pytest
from django.db.models import QuerySet
from django.utils import timezone

from activelearn.generations import pipeline, steps
from activelearn.generations.reconciler import pipeline_cadence, pipeline_reconcile
from activelearn.models import CheckpointStatus, GenerationRun, PRMCheckpoint, ScoreChunk, ScoreChunkStatus
from labeling.models import Generation, GenerationStatus, Task
from tests.activelearn.pipeline_factories import config, labels, pool, queued

S = GenerationStatus
LONG_AGO = timezone.now() - timedelta(days=1)


@pytest.fixture(autouse=True)
def pipeline_settings(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    settings.PIPELINE_GPU_QUEUE = "test-gpu"
    settings.PIPELINE_CPU_QUEUE = "test-cpu"
    settings.PIPELINE_SCORE_CHUNK_SIZE = 2
    settings.PIPELINE_HEARTBEAT_STALE_S = 60
    settings.PIPELINE_MAX_ATTEMPTS = 3


def age(generation: Generation, **fields: object) -> None:
    GenerationRun.objects.filter(generation=generation).update(**fields)


@pytest.mark.django_db
def test_it_leaves_a_step_with_a_fresh_heartbeat_alone(django_capture_on_commit_callbacks):
    generation = pipeline.generation_start(config=config())

    with django_capture_on_commit_callbacks() as callbacks:
        report = pipeline_reconcile()

    assert report.redispatched == [] and queued(callbacks) == []
    assert generation.run.dispatched_at is not None


@pytest.mark.django_db
def test_it_dispatches_a_step_whose_message_was_lost_and_only_once_per_interval(django_capture_on_commit_callbacks):
    generation = pipeline.generation_start(config=config())
    age(generation, dispatched_at=LONG_AGO)

    with django_capture_on_commit_callbacks() as callbacks:
        assert pipeline_reconcile().redispatched == [generation.pk]
        assert pipeline_reconcile().redispatched == []

    assert queued(callbacks) == [("generation_prepare_task", (generation.pk,), "test-cpu")]


@pytest.mark.django_db
def test_it_redispatches_training_whose_heartbeat_went_stale(django_capture_on_commit_callbacks):
    labels(2)
    generation = pipeline.generation_start(config=config())
    steps.generation_prepare(generation_id=generation.pk)
    run = GenerationRun.objects.get(generation=generation)
    assert run.checkpoint_id is not None
    PRMCheckpoint.objects.filter(pk=run.checkpoint_id).update(heartbeat_at=timezone.now())
    age(generation, dispatched_at=LONG_AGO)
    assert pipeline_reconcile().redispatched == []

    PRMCheckpoint.objects.filter(pk=run.checkpoint_id).update(heartbeat_at=LONG_AGO)
    with django_capture_on_commit_callbacks() as callbacks:
        assert pipeline_reconcile().redispatched == [generation.pk]

    assert queued(callbacks) == [("generation_train_task", (generation.pk,), "test-gpu")]


@pytest.mark.django_db
def test_a_second_trainer_cannot_claim_a_checkpoint_with_a_live_heartbeat():
    labels(2)
    generation = pipeline.generation_start(config=config())
    steps.generation_prepare(generation_id=generation.pk)
    checkpoint = GenerationRun.objects.get(generation=generation).checkpoint
    assert checkpoint is not None
    PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(heartbeat_at=timezone.now())

    steps.generation_train(generation_id=generation.pk)

    checkpoint.refresh_from_db()
    assert (checkpoint.status, checkpoint.steps_done) == (CheckpointStatus.TRAINING, 0)
    assert Generation.objects.get(pk=generation.pk).status == S.TRAINING


def _scoring() -> tuple[Generation, QuerySet[ScoreChunk]]:
    PRMCheckpoint.objects.create(base_model="tiny:bert", status=CheckpointStatus.READY, path="/x")
    pool(problems=1, per_problem=6)
    generation = pipeline.generation_start(config={"retrain": False, "k": 2})
    steps.generation_prepare(generation_id=generation.pk)
    return generation, ScoreChunk.objects.filter(run__generation=generation).order_by("pk")


@pytest.mark.django_db
def test_it_requeues_a_chunk_whose_worker_died_but_not_chunks_waiting_in_a_busy_queue(
    django_capture_on_commit_callbacks,
):
    _generation, chunks = _scoring()
    dead, alive, _waiting = chunks
    ScoreChunk.objects.filter(pk=dead.pk).update(status="running", heartbeat_at=LONG_AGO, enqueued_at=LONG_AGO)
    ScoreChunk.objects.filter(pk=alive.pk).update(status="running", heartbeat_at=timezone.now())

    with django_capture_on_commit_callbacks() as callbacks:
        report = pipeline_reconcile()

    assert report.chunks_requeued == [dead.pk]
    assert queued(callbacks) == [("generation_score_chunk_task", (dead.pk,), "test-gpu")]


@pytest.mark.django_db
def test_it_requeues_pending_chunks_when_the_whole_step_stalled(django_capture_on_commit_callbacks):
    generation, chunks = _scoring()
    chunks.update(enqueued_at=LONG_AGO)
    age(generation, dispatched_at=LONG_AGO)

    with django_capture_on_commit_callbacks():
        report = pipeline_reconcile()

    assert sorted(report.chunks_requeued) == sorted(c.pk for c in chunks)


@pytest.mark.django_db
def test_a_chunk_that_keeps_dying_fails_the_generation_visibly():
    generation, chunks = _scoring()
    ScoreChunk.objects.filter(pk=chunks[0].pk).update(
        status=ScoreChunkStatus.RUNNING, heartbeat_at=LONG_AGO, enqueued_at=LONG_AGO, attempts=3
    )

    report = pipeline_reconcile()

    generation.refresh_from_db()
    assert report.failed == [generation.pk]
    assert generation.status == S.FAILED
    assert "claimed 3 times" in generation.error
    retried = pipeline.generation_retry(generation_id=generation.pk)
    assert retried.status == S.SCORING
    assert set(chunks.values_list("status", "attempts")) == {(ScoreChunkStatus.PENDING, 0)}


@pytest.mark.django_db
def test_cadence_is_off_by_default():
    assert pipeline_cadence() is None
    assert not Generation.objects.exists()


@pytest.mark.django_db
def test_cadence_starts_the_next_generation_when_open_tasks_run_low(settings):
    settings.PIPELINE_AUTO_START_BELOW_OPEN_TASKS = 2
    settings.PIPELINE_AUTO_START_CONFIG = '{"base_model": "tiny:bert", "k": 5}'
    labels(3)
    current = Generation.objects.create(number=0, status=S.OPEN)
    solutions = pool(problems=1, per_problem=3)
    for solution in solutions:
        Task.objects.create(generation=current, solution=solution)
    assert pipeline_cadence() is None

    Task.objects.filter(solution=solutions[0]).update(status="done")
    Task.objects.filter(solution=solutions[1]).update(status="done")
    started = pipeline_cadence()

    assert started is not None and (started.number, started.status, started.run.config["k"]) == (1, S.REQUESTED, 5)
    assert pipeline_cadence() is None  # never two at once


@pytest.mark.django_db
def test_cadence_waits_for_a_person_after_a_failure(settings):
    settings.PIPELINE_AUTO_START_EVERY_S = 1
    Generation.objects.create(number=0, status=S.FAILED, started_at=LONG_AGO)

    assert pipeline_cadence() is None
