"""Moving a generation on: the work of its current step enqueued after commit, on the queues
named by ``PIPELINE_GPU_QUEUE`` (training, scoring) and ``PIPELINE_CPU_QUEUE`` (the rest),
and scoring's finish once its last chunk is done."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from activelearn.generations.machine import generation_transition
from activelearn.generations.pool import score_chunks_create
from activelearn.models import GenerationRun, ScoreChunk, ScoreChunkStatus
from annotate.celery import send_after_commit
from labeling.models import Generation, GenerationStatus

_S = GenerationStatus


def _enqueue(task: str, *args: int, gpu: bool, soft_limit: int) -> None:
    send_after_commit(
        f"activelearn.tasks.{task}",
        args=args,
        queue=settings.PIPELINE_GPU_QUEUE if gpu else settings.PIPELINE_CPU_QUEUE,
        soft_time_limit=soft_limit,
        time_limit=soft_limit + settings.PIPELINE_HARD_LIMIT_GRACE_S,
    )


def generation_dispatch(*, generation_id: int) -> None:
    """Enqueue the work of the generation's current step (after commit). Safe to repeat.

    For SCORING this also freezes the pool into chunks (once) and enqueues every chunk
    not done; when there is nothing left to score it moves on to grading.
    """
    status = Generation.objects.filter(pk=generation_id).values_list("status", flat=True).first()
    cpu_limit = settings.PIPELINE_CPU_TIME_LIMIT_S
    GenerationRun.objects.filter(generation_id=generation_id).update(dispatched_at=timezone.now())
    if status == _S.SAMPLING:
        _enqueue("generation_sample_task", generation_id, gpu=False, soft_limit=cpu_limit)
    elif status == _S.REQUESTED:
        _enqueue("generation_prepare_task", generation_id, gpu=False, soft_limit=cpu_limit)
    elif status == _S.TRAINING:
        _enqueue("generation_train_task", generation_id, gpu=True, soft_limit=settings.PIPELINE_TRAIN_TIME_LIMIT_S)
    elif status == _S.SCORING:
        run = GenerationRun.objects.get(generation_id=generation_id)
        score_chunks_create(run=run)
        chunk_ids = list(run.chunks.exclude(status=ScoreChunkStatus.DONE).values_list("pk", flat=True))
        if not chunk_ids:
            scoring_finish(run=run)
            return
        score_chunks_enqueue(chunk_ids=chunk_ids)
    elif status == _S.GRADING:
        _enqueue("generation_grade_task", generation_id, gpu=False, soft_limit=cpu_limit)
    elif status == _S.SELECTING:
        _enqueue("generation_select_task", generation_id, gpu=False, soft_limit=cpu_limit)


def score_chunks_enqueue(*, chunk_ids: Sequence[int]) -> None:
    ScoreChunk.objects.filter(pk__in=chunk_ids).update(enqueued_at=timezone.now())
    for chunk_id in chunk_ids:
        _enqueue("generation_score_chunk_task", chunk_id, gpu=True, soft_limit=settings.PIPELINE_SCORE_TIME_LIMIT_S)


def scored_refresh(*, run_id: int) -> None:
    total = ScoreChunk.objects.filter(run_id=run_id).aggregate(total=Sum("scored"))["total"] or 0
    GenerationRun.objects.filter(pk=run_id).update(scored=total)


def scoring_finish(*, run: GenerationRun) -> None:
    """SCORING → GRADING once no chunk is left. Each finisher checks after its own
    commit, so the last one to finish always sees all done; the conditional transition
    lets only one of several simultaneous finishers advance."""
    if ScoreChunk.objects.filter(run_id=run.pk).exclude(status=ScoreChunkStatus.DONE).exists():
        return
    scored_refresh(run_id=run.pk)
    with transaction.atomic():
        if generation_transition(generation_id=run.generation_id, from_=_S.SCORING, to=_S.GRADING):
            generation_dispatch(generation_id=run.generation_id)
