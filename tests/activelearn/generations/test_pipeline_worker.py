"""The pipeline through real Celery worker processes on the configured broker.

The pipeline enqueues its follow-up tasks itself, on PIPELINE_GPU_QUEUE and
PIPELINE_CPU_QUEUE; both point at a private queue here, in this process and in the
workers' environment, so nothing else consumes them and they consume nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections

from activelearn.generations import pipeline, steps
from activelearn.generations.config import GenerationRunningError
from activelearn.generations.reconciler import pipeline_reconcile
from activelearn.models import GenerationRun, ScoreChunk, ScoreChunkStatus, SolutionScore
from labeling.models import Generation, GenerationStatus, Task
from tests import conftest as shared
from tests.activelearn.pipeline_factories import config, labels, pool
from tests.conftest import WorkerProcess

S = GenerationStatus
pytestmark = [pytest.mark.celery_worker, pytest.mark.slow]
STALE_S = 2


@pytest.fixture
def queue(settings, tmp_path) -> Iterator[str]:
    name = f"test-pipeline-{uuid.uuid4().hex[:10]}"
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    settings.PIPELINE_GPU_QUEUE = settings.PIPELINE_CPU_QUEUE = name
    settings.PIPELINE_HEARTBEAT_STALE_S = STALE_S
    settings.PIPELINE_SCORE_CHUNK_SIZE = 3
    settings.PIPELINE_SCORE_BATCH = 1
    yield name
    from annotate.celery import app

    # Leave nothing behind on a shared broker (Redis in CI).
    # The filesystem transport may have no such queue once it is empty.
    with app.connection_for_write() as conn, contextlib.suppress(Exception):
        conn.default_channel.queue_purge(name)


@pytest.fixture
def start_worker(transactional_db, queue, tmp_path) -> Iterator[Callable[[], WorkerProcess]]:
    workers: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        log = tmp_path / f"worker-{len(workers)}.log"
        env = os.environ | {
            "DATABASE_URL": shared.test_database_url(),
            "SECRET_KEY": django_settings.SECRET_KEY,
            "CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
            "PIPELINE_GPU_QUEUE": queue,
            "PIPELINE_CPU_QUEUE": queue,
            "PIPELINE_HEARTBEAT_STALE_S": str(STALE_S),
            "PIPELINE_HEARTBEAT_EVERY_S": "1",
            # These tests drive the reconciler themselves (test_fault_worker_restart covers
            # the worker's own pass at start).
            "PIPELINE_RECONCILE_AT_WORKER_START": "false",
            "PIPELINE_SCORE_CHUNK_SIZE": "3",
            "PIPELINE_SCORE_BATCH": "1",
        }
        with log.open("w") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "annotate", "worker", "-Q", queue, "--pool=solo",
                 "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel=INFO",
                 f"--hostname=pipeline{len(workers)}@%h"],
                stdout=sink, stderr=subprocess.STDOUT, env=env, text=True, cwd=django_settings.BASE_DIR,
            )  # fmt: skip
        worker = WorkerProcess(process, queue, log)
        workers.append(worker)
        deadline = time.monotonic() + 60
        while "ready." not in worker.output():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"celery worker did not start:\n{worker.output()}")
            time.sleep(0.2)
        return worker

    yield start
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.terminate()
            try:
                worker.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


def wait_for(condition: Callable[[], bool], *, timeout: float, logs: Callable[[], str], poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, logs()
        time.sleep(poll)


def settled(generation: Generation) -> bool:
    generation.refresh_from_db()
    return generation.status in (S.OPEN, S.FAILED)


def test_a_worker_runs_a_generation_from_the_pool_to_open_tasks(start_worker):
    labels()
    solutions = pool(problems=3, per_problem=6)
    worker = start_worker()

    generation = pipeline.generation_start(config=config(k=6, per_problem=False))
    wait_for(lambda: settled(generation), timeout=150, logs=worker.output)

    assert generation.status == S.OPEN, generation.error + worker.output()
    run = GenerationRun.objects.get(generation=generation)
    assert (run.scored, run.score_total, run.graded, run.selected) == (18, 18, 18, 6)
    assert ScoreChunk.objects.filter(run=run, status=ScoreChunkStatus.DONE).count() == 6
    assert SolutionScore.objects.filter(checkpoint=run.checkpoint).count() == len(solutions)
    tasks = Task.objects.filter(generation=generation)
    assert tasks.count() == 6
    assert all(t.priority == t.verifier_score for t in tasks)


def test_a_worker_killed_while_scoring_is_replaced_and_the_generation_completes(start_worker):
    labels()
    solutions = pool(problems=4, per_problem=6)
    generation = pipeline.generation_start(config=config(k=8))
    # Train here, so the worker's first chunk spends its first seconds loading the model:
    # a wide window to kill it in with a chunk claimed.
    steps.generation_prepare(generation_id=generation.pk)
    steps.generation_train(generation_id=generation.pk)
    generation.refresh_from_db()
    assert generation.status == S.SCORING
    chunks = ScoreChunk.objects.filter(run__generation=generation)
    assert chunks.count() == 8

    first = start_worker()
    wait_for(lambda: chunks.filter(status=ScoreChunkStatus.RUNNING).exists(), timeout=180, logs=first.output, poll=0.02)
    first.process.send_signal(signal.SIGKILL)
    first.process.wait()
    killed = chunks.get(status=ScoreChunkStatus.RUNNING)
    assert chunks.exclude(status=ScoreChunkStatus.DONE).exists()

    second = start_worker()
    # The killed chunk's message died with its worker; the rest are served.
    wait_for(
        lambda: list(chunks.exclude(status=ScoreChunkStatus.DONE).values_list("pk", flat=True)) == [killed.pk],
        timeout=180,
        logs=second.output,
    )
    time.sleep(STALE_S + 0.5)
    report = pipeline_reconcile()
    assert report.chunks_requeued == [killed.pk]

    wait_for(lambda: settled(generation), timeout=180, logs=second.output)
    assert generation.status == S.OPEN, generation.error
    killed.refresh_from_db()
    assert (killed.status, killed.attempts) == (ScoreChunkStatus.DONE, 2)
    run = GenerationRun.objects.get(generation=generation)
    assert SolutionScore.objects.filter(checkpoint=run.checkpoint).count() == len(solutions)
    assert run.scored == len(solutions)
    assert Task.objects.filter(generation=generation).count() == 8
    assert Task.objects.values("solution_id").distinct().count() == Task.objects.count()


@pytest.mark.postgres
def test_two_starts_at_once_make_one_generation(transactional_db, queue):
    labels(2)
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def start() -> None:
        try:
            barrier.wait()
            outcomes.append(pipeline.generation_start(config=config()))
        except GenerationRunningError as error:
            outcomes.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert connection.vendor == "postgresql"
    assert sorted(type(o).__name__ for o in outcomes) == ["Generation", "GenerationRunningError"]
    assert Generation.objects.filter(status=S.REQUESTED).count() == 1
    assert GenerationRun.objects.count() == 1
