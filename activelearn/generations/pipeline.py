"""Services: a generation as a durable state machine, and the steps that move it.

    (sampling ─▶) requested ─▶ training ─▶ scoring ─▶ grading ─▶ selecting ─▶ open ─▶ closed
                      └──────(reuse a checkpoint)──▶┘
    any running step ─▶ failed (with the error) ─▶ retry resumes that step

``Generation.status`` is the source of truth; it changes only in
``generation_transition`` (a conditional UPDATE ``WHERE status = from``), so two
workers finishing the same step cannot both advance it and a late success cannot
overwrite a failure. ``GenerationRun`` holds the config, progress, timings, the
checkpoint and the claims.

Every step is idempotent, so a redelivered task, a re-enqueue by the reconciler or a
retry changes nothing already done:

* sampling (with ``sample_n``): the generation's own pool, drawn from the generator in
  claimed chunks (``sampling``);
* prepare: the checkpoint row is created once (under a row lock on the run);
* training: ``checkpoint_run`` resumes from the last saved optimizer step, and a claim
  on the checkpoint's heartbeat keeps a second worker from training it at the same time;
* scoring: the pool is frozen into ``ScoreChunk`` rows once; a chunk is claimed with a
  conditional UPDATE (pending, or running with a stale heartbeat), skips solutions the
  checkpoint already scored, and scores are upserts (``solution_score_once_per_checkpoint``);
* grading: only solutions never graded are graded;
* selecting: the SELECTING → OPEN transition and the task inserts are one transaction,
  so the step happens entirely once (``task_unique_per_generation`` backs it up).

Work is enqueued with ``transaction.on_commit`` only, on the queues named by
``PIPELINE_GPU_QUEUE`` (training, scoring) and ``PIPELINE_CPU_QUEUE`` (the rest).
Nothing here imports torch; the GPU steps import it through the services they call.

This module starts, retries and closes a generation. The rest of the package, each
using only those listed before it: ``config`` (what a generation does, the errors),
``machine`` (the transitions and the claims), ``pool`` (the solutions it scores, frozen
into chunks), ``dispatch`` (enqueueing the current step), ``steps`` (the five steps).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max
from django.utils import timezone

from activelearn.checkpoints.runs import backbone_check
from activelearn.generations.config import (
    INTEGER_MAX,
    GenerationConfig,
    GenerationConfigError,
    GenerationNumberTakenError,
    GenerationRunningError,
    GenerationStateError,
)
from activelearn.generations.dispatch import generation_dispatch
from activelearn.generations.machine import RUNNING, generation_transition
from activelearn.generations.steps import reused_checkpoint
from activelearn.models import GenerationRun, SampleChunk, SampleChunkStatus, ScoreChunk, ScoreChunkStatus
from labeling.models import Generation, GenerationStatus, Phase

_S = GenerationStatus


def _next_number() -> int:
    latest = Generation.objects.filter(number__gte=0).aggregate(latest=Max("number"))["latest"]
    return 0 if latest is None else latest + 1


def generation_start(
    *, number: int | None = None, config: GenerationConfig | Mapping[str, Any] | None = None
) -> Generation:
    """Create a REQUESTED generation with its run and enqueue its first step (after commit).

    ``number`` defaults to one past the highest. Raises GenerationRunningError when a
    generation is running (two starts at once: one wins the
    ``generation_at_most_one_running`` constraint, the other gets this error),
    GenerationNumberTakenError, GenerationConfigError.
    """
    if number is not None and not (isinstance(number, int) and 0 <= number <= INTEGER_MAX):
        raise GenerationConfigError(f"the generation number must be an integer in [0, {INTEGER_MAX}], not {number}")
    resolved = config if isinstance(config, GenerationConfig) else GenerationConfig.from_json(config or {})
    resolved.check()
    if not resolved.base_model:
        resolved = GenerationConfig.from_json({**resolved.to_json(), "base_model": settings.PRM_BACKBONE})
    if resolved.retrain:
        try:
            backbone_check(spec=resolved.base_model)
        except ValueError as error:
            raise GenerationConfigError(str(error)) from None
    else:
        reused_checkpoint(resolved)  # fail now, not in a worker
    if resolved.sample_n:
        from activelearn.generations.sampler import sampling_problem

        if (problem := sampling_problem()) is not None:
            raise GenerationConfigError(problem)
    running = Generation.objects.filter(phase=Phase.TWO, status__in=RUNNING).first()
    if running is not None:
        raise GenerationRunningError(f"{running} is running ({running.status})")
    now = timezone.now()
    first = _S.SAMPLING if resolved.sample_n else _S.REQUESTED
    try:
        with transaction.atomic():
            generation = Generation.objects.create(
                number=_next_number() if number is None else number,
                phase=Phase.TWO,
                status=first,
                config=resolved.to_json(),
                started_at=now,
            )
            GenerationRun.objects.create(
                generation=generation,
                config=resolved.to_json(),
                step=first,
                step_started_at=now,
                sampling_started_at=now if resolved.sample_n else None,
                dispatched_at=now,
            )
            generation_dispatch(generation_id=generation.pk)
    except IntegrityError:
        running = Generation.objects.filter(phase=Phase.TWO, status__in=RUNNING).first()
        if running is not None:
            raise GenerationRunningError(f"{running} is running ({running.status})") from None
        raise GenerationNumberTakenError(f"generation number {number} is taken") from None
    return generation


def generation_retry(*, generation_id: int) -> Generation:
    """Resume a FAILED generation at the step that failed; raises GenerationStateError otherwise."""
    generation = Generation.objects.select_related("run").get(pk=generation_id)
    if generation.status != _S.FAILED:
        raise GenerationStateError(f"{generation} is {generation.status}, not failed")
    step = generation.run.step
    with transaction.atomic():
        if not generation_transition(generation_id=generation_id, from_=_S.FAILED, to=step):
            raise GenerationStateError(f"{generation} changed status meanwhile")
        # Failed chunks are sampled or scored again; a chunk that kept dying gets its attempts back.
        ScoreChunk.objects.filter(run=generation.run).exclude(status=ScoreChunkStatus.DONE).update(
            status=ScoreChunkStatus.PENDING, claim_token="", error="", heartbeat_at=None, attempts=0
        )
        SampleChunk.objects.filter(run=generation.run).exclude(status=SampleChunkStatus.DONE).update(
            status=SampleChunkStatus.PENDING, claim_token="", error="", heartbeat_at=None, attempts=0
        )
        GenerationRun.objects.filter(pk=generation.run.pk).update(retries=F("retries") + 1)
        generation_dispatch(generation_id=generation_id)
    generation.refresh_from_db()
    return generation


def generation_close(*, generation_id: int) -> Generation:
    """OPEN (or FAILED) → CLOSED: the queue stops serving its tasks; they keep their status."""
    generation = Generation.objects.get(pk=generation_id)
    if generation.status not in (_S.OPEN, _S.FAILED) or not generation_transition(
        generation_id=generation_id, from_=generation.status, to=_S.CLOSED
    ):
        raise GenerationStateError(f"{generation} is {generation.status}; only open or failed ones close")
    generation.refresh_from_db()
    return generation
