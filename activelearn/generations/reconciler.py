"""Service: notice pipeline steps whose worker died, and re-enqueue them (beat, every minute).

A worker that dies mid-task (OOM, SIGKILL, lost host) leaves its step claimed with a
heartbeat that stops moving. acks_late makes Redis redeliver the message, but only after
the visibility timeout (hours, by design: it must outlast training), and the filesystem
broker never does; so the reconciler is what resumes a step:

* REQUESTED / GRADING / SELECTING: the run's last sign of life (heartbeat, else the
  time it was dispatched) is stale → dispatch the step again.
* TRAINING: the checkpoint's heartbeat (else the dispatch time) is stale, or the
  checkpoint is READY/FAILED while the generation still says TRAINING (the worker died
  between the two writes) → dispatch the training task; it claims the stale checkpoint
  and ``checkpoint_run`` resumes from the last saved optimizer step.
* SCORING and SAMPLING: a RUNNING chunk with a stale heartbeat → re-enqueue it (it is
  claimable); PENDING chunks are re-enqueued only when the whole step is stalled (their
  messages were lost), since waiting in a busy queue is normal.

Every re-enqueue is rate-limited to once per stale interval (``dispatched_at``,
``ScoreChunk.enqueued_at``), and a step or chunk that has been claimed
``PIPELINE_MAX_ATTEMPTS`` times without finishing fails the generation instead of
looping forever (a hard time limit that kills it every time, say).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from activelearn.generations.dispatch import generation_dispatch, score_chunks_enqueue
from activelearn.generations.machine import RUNNING, generation_fail
from activelearn.generations.sampling import sample_chunks_enqueue
from activelearn.models import CheckpointStatus, GenerationRun, SampleChunk, ScoreChunk, ScoreChunkStatus
from labeling.models import Generation, GenerationStatus, Phase

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    redispatched: list[int] = field(default_factory=list)  # generation ids
    chunks_requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


def _latest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return max(present) if present else None


def _stale(moment: datetime | None, before: datetime) -> bool:
    return moment is None or moment < before


def pipeline_reconcile(*, now: datetime | None = None) -> ReconcileReport:
    """One pass over the running generation(s); see the module docstring."""
    now = now or timezone.now()
    before = now - timedelta(seconds=settings.PIPELINE_HEARTBEAT_STALE_S)
    report = ReconcileReport()
    runs = GenerationRun.objects.select_related("generation", "checkpoint").filter(
        generation__phase=Phase.TWO, generation__status__in=RUNNING
    )
    for run in runs:
        status = run.generation.status
        if status in (GenerationStatus.SCORING, GenerationStatus.SAMPLING):
            _reconcile_chunks(run=run, step=status, before=before, report=report)
            continue
        if status == GenerationStatus.TRAINING and run.checkpoint is not None:
            finished = run.checkpoint.status in (CheckpointStatus.READY, CheckpointStatus.FAILED)
            alive = _latest(run.checkpoint.heartbeat_at, run.dispatched_at)
            if not finished and not _stale(alive, before):
                continue
            if finished and not _stale(run.dispatched_at, before):
                continue
        elif not _stale(_latest(run.heartbeat_at, run.dispatched_at), before):
            continue
        if run.step_attempts >= settings.PIPELINE_MAX_ATTEMPTS:
            _give_up(run=run, what=f"step {status}", attempts=run.step_attempts, report=report)
            continue
        logger.warning("%s: %s looks stalled; dispatching it again", run.generation, status)
        with transaction.atomic():
            generation_dispatch(generation_id=run.generation_id)
        report.redispatched.append(run.generation_id)
    return report


def pipeline_reconcile_at_worker_start(*, queues: Iterable[str]) -> threading.Timer | None:
    """Reconcile when a pipeline worker starts, so recovery does not hang on beat alone.

    A worker restarted after a crash (a container's restart policy, systemd) finds its
    predecessor's claims still fresh: they go stale ``PIPELINE_HEARTBEAT_STALE_S`` after the
    crash. So one pass runs now (anything already stale: a worker that was down for a while)
    and one when a claim made just before this start would have gone stale. Workers that
    consume no pipeline queue (exports only, tests' private queues) do neither. Returns the
    timer of the second pass.
    """
    if not settings.PIPELINE_RECONCILE_AT_WORKER_START or not set(queues) & {
        settings.PIPELINE_CPU_QUEUE,
        settings.PIPELINE_GPU_QUEUE,
    }:
        return None
    _reconcile_logged("at worker start")
    later = threading.Timer(
        settings.PIPELINE_HEARTBEAT_STALE_S + settings.PIPELINE_HEARTBEAT_EVERY_S,
        _reconcile_in_thread,
        args=("after worker start",),
    )
    later.daemon = True
    later.start()
    return later


def _reconcile_logged(when: str) -> None:
    try:
        report = pipeline_reconcile()
        if report.redispatched or report.chunks_requeued or report.failed:
            logger.warning("reconciled %s: %s", when, report)
    except Exception:
        # A database that is not up yet must not stop the worker; beat (or the next start) retries.
        logger.exception("reconcile %s failed", when)


def _reconcile_in_thread(when: str) -> None:
    try:
        _reconcile_logged(when)
    finally:
        connection.close()  # this thread's own


def _reconcile_chunks(*, run: GenerationRun, step: str, before: datetime, report: ReconcileReport) -> None:
    # The two chunked steps share the claim columns and ScoreChunkStatus's values.
    sampling = step == GenerationStatus.SAMPLING
    model: type[ScoreChunk] | type[SampleChunk] = SampleChunk if sampling else ScoreChunk
    enqueue = sample_chunks_enqueue if sampling else score_chunks_enqueue
    chunks: list[ScoreChunk | SampleChunk] = list(
        model.objects.filter(run=run)
        .exclude(status=ScoreChunkStatus.DONE)
        .only("pk", "status", "heartbeat_at", "enqueued_at", "attempts")
    )
    if not chunks:
        # No chunk yet (the dispatch died before creating them) or all done (the last
        # finisher died before advancing): a dispatch does whichever is missing.
        if _stale(run.dispatched_at, before):
            with transaction.atomic():
                generation_dispatch(generation_id=run.generation_id)
            report.redispatched.append(run.generation_id)
        return
    dead = [
        c
        for c in chunks
        if c.status == ScoreChunkStatus.RUNNING and _stale(_latest(c.heartbeat_at, c.enqueued_at), before)
    ]
    worn = [c for c in dead if c.attempts >= settings.PIPELINE_MAX_ATTEMPTS]
    if worn:
        _give_up(run=run, what=f"{step} chunk {worn[0].pk}", attempts=worn[0].attempts, report=report)
        return
    requeue = [c.pk for c in dead]
    progress = model.objects.filter(run=run).aggregate(heartbeat=Max("heartbeat_at"), enqueued=Max("enqueued_at"))
    if _stale(_latest(progress["heartbeat"], progress["enqueued"], run.dispatched_at), before):
        requeue += [c.pk for c in chunks if c.status == ScoreChunkStatus.PENDING]
    if requeue:
        logger.warning("%s: re-enqueueing %s chunks %s", run.generation, step, requeue)
        with transaction.atomic():
            enqueue(chunk_ids=requeue)
        report.chunks_requeued.extend(requeue)


def _give_up(*, run: GenerationRun, what: str, attempts: int, report: ReconcileReport) -> None:
    error = (
        f"{what} was claimed {attempts} times without finishing (worker lost or killed by its hard time limit); "
        "retry once the cause is fixed"
    )
    if generation_fail(generation_id=run.generation_id, error=error):
        report.failed.append(run.generation_id)


def _open_normal_tasks(generation: Generation) -> int:
    from labeling.models import TaskKind, TaskStatus

    return generation.tasks.filter(kind=TaskKind.NORMAL, status=TaskStatus.OPEN).count()


def pipeline_cadence(*, now: datetime | None = None) -> Generation | None:
    """Start the next generation automatically when the settings ask for it (beat).

    Off unless PIPELINE_AUTO_START_BELOW_OPEN_TASKS or PIPELINE_AUTO_START_EVERY_S is
    set. Never starts while one runs (and generation_start would refuse anyway), and
    never after a FAILED newest generation: that needs a person.
    """
    import json

    from activelearn.generations.config import GenerationRunningError
    from activelearn.generations.pipeline import generation_start

    below = settings.PIPELINE_AUTO_START_BELOW_OPEN_TASKS
    every = settings.PIPELINE_AUTO_START_EVERY_S
    if not below and not every:
        return None
    now = now or timezone.now()
    generations = Generation.objects.filter(phase=Phase.TWO, number__gte=0)
    if generations.filter(status__in=RUNNING).exists():
        return None
    newest = generations.order_by("-number").first()
    if newest is not None and newest.status == GenerationStatus.FAILED:
        return None
    due = newest is None
    if newest is not None and below:
        # A closed newest generation serves nothing: zero open tasks.
        due = due or newest.status != GenerationStatus.OPEN or _open_normal_tasks(newest) < below
    if newest is not None and every:
        started = newest.started_at or newest.created_at
        due = due or started <= now - timedelta(seconds=every)
    if not due:
        return None
    try:
        return generation_start(config=json.loads(settings.PIPELINE_AUTO_START_CONFIG))
    except GenerationRunningError:
        return None
