"""Celery tasks of the active-learning app: take ids, load, call one service.

Routing (``CELERY_TASK_ROUTES`` in settings): training and scoring go to the "gpu" queue,
grading and evaluation to "cpu". ``acks_late`` + ``reject_on_worker_lost``: a worker that
dies mid-task leaves the message to be redelivered, and every service here is safe to
run again (training resumes from its last checkpoint; scores and grades are upserts).
Services import torch lazily, so enqueueing from the web process never loads it.
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_ready
from django.db import connections

from activelearn.models import PRMCheckpoint
from annotate.celery import task


@task()
def train_checkpoint_task(checkpoint_id: int) -> None:
    from activelearn.checkpoints.runs import checkpoint_run

    checkpoint_run(checkpoint_id=checkpoint_id)


@task()
def score_chunk_task(
    checkpoint_id: int,
    first_id: int,
    last_id: int,
    batch_size: int = 16,
    reduction: str = "product",
    neutral_as: str = "positive",
) -> int:
    from activelearn.checkpoints.scoring import solutions_score_range

    return solutions_score_range(
        checkpoint=PRMCheckpoint.objects.get(pk=checkpoint_id),
        first_id=first_id,
        last_id=last_id,
        batch_size=batch_size,
        reduction="min" if reduction == "min" else "product",
        neutral_as="negative" if neutral_as == "negative" else "positive",
    )


@task()
def grade_chunk_task(first_id: int, last_id: int, timeout_s: float = 5.0) -> int:
    from activelearn.grading.service import solutions_grade_range

    return solutions_grade_range(first_id=first_id, last_id=last_id, timeout_s=timeout_s)


@task()
def evaluate_checkpoint_task(checkpoint_id: int, generation: int | None = None) -> None:
    from activelearn.checkpoints.evaluation import checkpoint_evaluate

    checkpoint_evaluate(checkpoint=PRMCheckpoint.objects.get(pk=checkpoint_id), generation=generation)


# --- The generation pipeline (activelearn.generations) -----------------------------
# Queues and time limits are given by the pipeline on every enqueue (PIPELINE_GPU_QUEUE,
# PIPELINE_CPU_QUEUE, PIPELINE_*_TIME_LIMIT_S); CELERY_TASK_ROUTES covers manual sends.


@task()
def generation_sample_task(generation_id: int) -> None:
    from activelearn.generations.sampling import sampling_dispatch

    sampling_dispatch(generation_id=generation_id)


@task()
def generation_sample_chunk_task(chunk_id: int) -> int:
    from activelearn.generations.sampling import sample_chunk_run

    return sample_chunk_run(chunk_id=chunk_id)


@task()
def generation_prepare_task(generation_id: int) -> None:
    from activelearn.generations.steps import generation_prepare

    generation_prepare(generation_id=generation_id)


@task()
def generation_train_task(generation_id: int) -> None:
    from activelearn.generations.steps import generation_train

    generation_train(generation_id=generation_id)


@task()
def generation_score_chunk_task(chunk_id: int) -> int:
    from activelearn.generations.steps import score_chunk_run

    return score_chunk_run(chunk_id=chunk_id)


@task()
def generation_grade_task(generation_id: int) -> int:
    from activelearn.generations.steps import generation_grade

    return generation_grade(generation_id=generation_id)


@task()
def generation_select_task(generation_id: int) -> int:
    from activelearn.generations.steps import generation_select

    return generation_select(generation_id=generation_id)


def reconcile_at_worker_start(sender: Any, **kwargs: Any) -> None:
    from activelearn.generations.reconciler import pipeline_reconcile_at_worker_start

    # The sender is the worker's consumer; its task consumer knows the queues it serves.
    queues = [queue.name for queue in sender.task_consumer.queues]
    try:
        pipeline_reconcile_at_worker_start(queues=queues)
    finally:
        # The worker's main process forks pool children: it keeps no connection open.
        connections.close_all()


worker_ready.connect(reconcile_at_worker_start)


@task()
def pipeline_reconcile_task() -> None:
    from activelearn.generations.reconciler import pipeline_reconcile

    pipeline_reconcile()


@task()
def pipeline_cadence_task() -> None:
    from activelearn.generations.reconciler import pipeline_cadence

    pipeline_cadence()


# --- Step candidates (activelearn.stepgen.service) ----------------------------------
# Queued by labeling.work.candidates on STEPGEN_QUEUE. The task lived in the service
# module once; its registered name stays, as messages in flight carry it.


@task(name="activelearn.stepgen_service.generate_step_candidates")
def generate_step_candidates(*, assignment_id: int, step_index: int) -> str:
    from activelearn.stepgen.service import candidates_generate

    return candidates_generate(assignment_id=assignment_id, step_index=step_index).status
