"""The steps of a generation, each idempotent: prepare, training (GPU), scoring a chunk (GPU),
grading and selecting (CPU). Each claims its step, does the work, and moves the generation on."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, Max, OuterRef, Q
from django.utils import timezone

from activelearn.checkpoints.runs import (
    checkpoint_aggregation,
    checkpoint_create,
    checkpoint_run,
    checkpoint_threshold,
    checkpoint_threshold_decay,
)
from activelearn.generations.config import ERROR_MAX, GenerationConfig, GenerationConfigError
from activelearn.generations.dispatch import generation_dispatch, scored_refresh, scoring_finish
from activelearn.generations.liveness import Pulse
from activelearn.generations.machine import (
    chunk_claim,
    describe_error,
    generation_fail,
    generation_transition,
    run_claim,
    run_heartbeat,
    stale_before,
)
from activelearn.generations.pool import id_pages, run_pool_ids
from activelearn.models import (
    CheckpointObjective,
    CheckpointStatus,
    GenerationRun,
    PRMCheckpoint,
    ScoreChunk,
    ScoreChunkStatus,
    SolutionScore,
)
from activelearn.selection.rules import PoolCandidate, Selected, select_convincing, serving_order
from labeling.models import (
    Generation,
    GenerationStatus,
    Phase,
    SelectionReason,
    Solution,
    Task,
)
from labeling.work.opening import Pick, generation_tasks_open

if TYPE_CHECKING:
    from activelearn.prm.scoring import Reduction


logger = logging.getLogger(__name__)

_S = GenerationStatus

# --- Step: prepare (REQUESTED) -------------------------------------------------------


def reused_checkpoint(config: GenerationConfig) -> PRMCheckpoint:
    ready = PRMCheckpoint.objects.filter(status=CheckpointStatus.READY)
    checkpoint = (
        ready.filter(pk=config.checkpoint_id).first()
        if config.checkpoint_id is not None
        else ready.order_by("-pk").first()
    )
    if checkpoint is None:
        wanted = f"checkpoint {config.checkpoint_id}" if config.checkpoint_id is not None else "any checkpoint"
        raise GenerationConfigError(f"retrain is off but {wanted} is not READY")
    # An ORM scores whole solutions, not steps: selecting with one is a choice to be made by
    # naming it, never what "the newest checkpoint" turns out to be.
    if checkpoint.objective == CheckpointObjective.OUTCOME and config.checkpoint_id is None:
        raise GenerationConfigError(
            f"retrain is off and the newest READY checkpoint ({checkpoint.pk}) is an outcome-supervised model (ORM); "
            "give checkpoint_id: a PRM's, or this ORM's to select with it"
        )
    return checkpoint


def generation_prepare(*, generation_id: int) -> None:
    """REQUESTED: create the checkpoint to train (once) → TRAINING, or pick one → SCORING."""
    run = run_claim(generation_id=generation_id, step=_S.REQUESTED)
    if run is None:
        return
    try:
        config = GenerationConfig.from_json(run.config)
        if not config.retrain:
            checkpoint = reused_checkpoint(config)
            with transaction.atomic():
                GenerationRun.objects.filter(pk=run.pk).update(checkpoint=checkpoint)
                if generation_transition(generation_id=generation_id, from_=_S.REQUESTED, to=_S.SCORING):
                    generation_dispatch(generation_id=generation_id)
            return
        with transaction.atomic():
            # The lock makes "create the checkpoint unless the run has one" atomic: a
            # redelivered prepare must not create a second checkpoint row.
            locked = GenerationRun.objects.select_for_update().get(pk=run.pk)
            if locked.checkpoint_id is None:
                through = config.through_generation
                if through is None:
                    # "Every label so far" is every generation before this one (and phase 1):
                    # named, so the checkpoint says which labels it saw.
                    through = Generation.objects.filter(
                        number__gte=0, number__lt=run.generation.number, phase=Phase.TWO
                    ).aggregate(newest=Max("number"))["newest"]
                checkpoint = checkpoint_create(
                    base_model=config.base_model,
                    through_generation=through,
                    config={**config.training, "neutral": config.neutral},
                )
                # Unclaimed until a training task claims it (see generation_train).
                PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(heartbeat_at=None)
                GenerationRun.objects.filter(pk=run.pk).update(checkpoint=checkpoint)
            if generation_transition(generation_id=generation_id, from_=_S.REQUESTED, to=_S.TRAINING):
                generation_dispatch(generation_id=generation_id)
    except Exception as error:
        generation_fail(generation_id=generation_id, error=describe_error(error), step=_S.REQUESTED)
        raise


# --- Step: training (GPU) --------------------------------------------------------------


def _checkpoint_claim(*, checkpoint: PRMCheckpoint) -> bool:
    """Claim the right to train: a FAILED row back to TRAINING, or a TRAINING row whose
    heartbeat is null (never started) or stale (its worker died). A conditional UPDATE,
    so two workers never train the same checkpoint at once."""
    now = timezone.now()
    if checkpoint.status == CheckpointStatus.FAILED:
        return (
            PRMCheckpoint.objects.filter(pk=checkpoint.pk, status=CheckpointStatus.FAILED).update(
                status=CheckpointStatus.TRAINING, error="", finished_at=None, heartbeat_at=now
            )
            == 1
        )
    return (
        PRMCheckpoint.objects.filter(pk=checkpoint.pk, status=CheckpointStatus.TRAINING)
        .filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before(now)))
        .update(heartbeat_at=now)
        == 1
    )


def generation_train(*, generation_id: int) -> None:
    """TRAINING: train (or resume) the run's checkpoint, then → SCORING."""
    run = GenerationRun.objects.select_related("checkpoint").filter(generation_id=generation_id).first()
    if (
        run is None
        or run.checkpoint is None
        or not Generation.objects.filter(pk=generation_id, status=_S.TRAINING).exists()
    ):
        return
    checkpoint = run.checkpoint
    if checkpoint.status != CheckpointStatus.READY:
        if not _checkpoint_claim(checkpoint=checkpoint):
            logger.info("checkpoint %s is being trained elsewhere", checkpoint.pk)
            return
        GenerationRun.objects.filter(pk=run.pk).update(step_attempts=F("step_attempts") + 1)
        try:
            checkpoint = checkpoint_run(checkpoint_id=checkpoint.pk)
        except Exception as error:
            generation_fail(generation_id=generation_id, error=f"training: {describe_error(error)}", step=_S.TRAINING)
            raise
    if checkpoint.status == CheckpointStatus.READY:
        with transaction.atomic():
            if generation_transition(generation_id=generation_id, from_=_S.TRAINING, to=_S.SCORING):
                generation_dispatch(generation_id=generation_id)


# --- Step: scoring (GPU, in chunks) -----------------------------------------------------


def score_chunk_run(*, chunk_id: int) -> int:
    """Score one chunk if this call can claim it; returns solutions scored by this call.

    Claimable: PENDING, or RUNNING with a stale heartbeat (its worker died). Solutions
    the checkpoint already scored are skipped, so a re-run resumes where the dead
    worker stopped.
    """
    token = chunk_claim(model=ScoreChunk, chunk_id=chunk_id)
    if token is None:
        return 0
    chunk = ScoreChunk.objects.select_related("run__checkpoint").get(pk=chunk_id)
    run = chunk.run
    mine = ScoreChunk.objects.filter(pk=chunk_id, claim_token=token, status=ScoreChunkStatus.RUNNING)
    if run.checkpoint is None or not Generation.objects.filter(pk=run.generation_id, status=_S.SCORING).exists():
        # Failed or moved on meanwhile: hand the chunk back for a retry to pick up.
        mine.update(status=ScoreChunkStatus.PENDING, claim_token="")
        return 0
    config = GenerationConfig.from_json(run.config)
    ids = [int(i) for i in chunk.solution_ids]
    done = set(
        SolutionScore.objects.filter(checkpoint=run.checkpoint, solution_id__in=ids).values_list(
            "solution_id", flat=True
        )
    )
    todo = [i for i in ids if i not in done]
    reduction = cast("Reduction", config.reduction or checkpoint_aggregation(checkpoint=run.checkpoint))
    scored_here = 0
    try:
        from activelearn.checkpoints.scoring import solutions_score

        # The pulse covers loading the checkpoint and every batch (activelearn.generations.liveness).
        with Pulse(lambda: mine.update(heartbeat_at=timezone.now()) == 1) as pulse:
            for start in range(0, len(todo), settings.PIPELINE_SCORE_BATCH):
                scored_here += solutions_score(
                    checkpoint=run.checkpoint,
                    solution_ids=todo[start : start + settings.PIPELINE_SCORE_BATCH],
                    batch_size=config.score_batch_size,
                    reduction=reduction,
                    neutral_as="negative" if config.neutral_as == "negative" else "positive",
                )
                pulse.tick()
                if mine.update(heartbeat_at=timezone.now(), scored=len(done) + scored_here) != 1:
                    logger.warning("chunk %s: claim lost to another worker; stopping", chunk_id)
                    return scored_here
                scored_refresh(run_id=run.pk)
    except Exception as error:
        mine.update(status=ScoreChunkStatus.FAILED, error=describe_error(error)[:ERROR_MAX], finished_at=timezone.now())
        generation_fail(
            generation_id=run.generation_id,
            error=f"scoring chunk {chunk.first_id}-{chunk.last_id}: {describe_error(error)}",
            step=_S.SCORING,
        )
        raise
    if mine.update(status=ScoreChunkStatus.DONE, finished_at=timezone.now(), scored=len(done) + scored_here) != 1:
        return scored_here
    scoring_finish(run=run)
    return scored_here


# --- Step: grading (CPU) -----------------------------------------------------------------


def generation_grade(*, generation_id: int) -> int:
    """GRADING: grade every pool solution never graded, then → SELECTING; returns graded now."""
    run = run_claim(generation_id=generation_id, step=_S.GRADING)
    if run is None:
        return 0
    graded_now = 0
    try:
        from activelearn.grading.service import solutions_grade

        config = GenerationConfig.from_json(run.config)
        pool = run_pool_ids(run=run)
        GenerationRun.objects.filter(pk=run.pk).update(grade_total=len(pool))
        done = 0
        with Pulse(lambda: run_heartbeat(run=run, step=_S.GRADING)) as pulse:
            for page in id_pages(pool, settings.PIPELINE_GRADE_PAGE):
                # Never graded: a note is written by every grading, also "no reference answer".
                ungraded = list(
                    Solution.objects.filter(id__in=page, is_correct__isnull=True, grading_note="").values_list(
                        "id", flat=True
                    )
                )
                graded_now += solutions_grade(solution_ids=ungraded, timeout_s=config.grade_timeout_s)
                done += len(page)
                pulse.tick()
                if not run_heartbeat(run=run, step=_S.GRADING, graded=done):
                    return graded_now
    except Exception as error:
        generation_fail(generation_id=generation_id, error=f"grading: {describe_error(error)}", step=_S.GRADING)
        raise
    with transaction.atomic():
        if generation_transition(generation_id=generation_id, from_=_S.GRADING, to=_S.SELECTING):
            generation_dispatch(generation_id=generation_id)
    return graded_now


# --- Step: selecting (CPU) ----------------------------------------------------------------


def selection_candidates(*, run: GenerationRun) -> list[PoolCandidate]:
    """Scored pool solutions of the run's checkpoint that nobody labeled or was served.

    "Already labeled" is by content: a solution whose problem and steps match one that
    is (or was) a task in any generation is out, whatever row it sits in. Duplicates
    inside the pool count once (the lowest id).
    """
    served = Task.objects.filter(
        solution__problem_id=OuterRef("solution__problem_id"),
        solution__content_sha256=OuterRef("solution__content_sha256"),
    )
    candidates: list[PoolCandidate] = []
    seen: set[tuple[int, str]] = set()
    assert run.checkpoint is not None
    from activelearn.prm.evaluation import decayed_scores

    threshold = checkpoint_threshold(checkpoint=run.checkpoint)
    decay = checkpoint_threshold_decay(checkpoint=run.checkpoint)
    for page in id_pages(run_pool_ids(run=run)):
        rows = (
            SolutionScore.objects.filter(checkpoint_id=run.checkpoint_id, solution_id__in=page)
            .exclude(Exists(served))
            .order_by("solution_id")
            .values_list(
                "solution_id",
                "score",
                "step_scores",
                "solution__problem_id",
                "solution__content_sha256",
                "solution__is_correct",
            )
        )
        for solution_id, score, step_scores, problem_id, content, is_correct in rows:
            if (problem_id, content) in seen:
                continue
            seen.add((problem_id, content))
            candidates.append(
                PoolCandidate(
                    problem_id=problem_id,
                    solution_id=solution_id,
                    score=score,
                    is_correct=is_correct,
                    # The checkpoint finds no step below its threshold: it is fooled, if
                    # the answer is wrong (selection serves these first).
                    passes=min(decayed_scores([step_scores], decay)[0]) >= threshold if step_scores else None,
                )
            )
    return candidates


def generation_select(*, generation_id: int) -> int:
    """SELECTING: select, open the tasks and the QC items (labeling.work.opening), → OPEN; returns tasks created.

    One transaction that starts with the SELECTING → OPEN transition: a concurrent or
    redelivered selection blocks on the generation row, then finds it OPEN and does
    nothing, and a crash leaves neither tasks nor the transition behind.
    """
    run = run_claim(generation_id=generation_id, step=_S.SELECTING)
    if run is None:
        return 0
    try:
        config = GenerationConfig.from_json(run.config)
        with transaction.atomic():
            if not generation_transition(generation_id=generation_id, from_=_S.SELECTING, to=_S.OPEN):
                return 0
            candidates = selection_candidates(run=run)
            # One selection rule for the pipeline and the campaign simulation; ties are
            # broken by a shuffle seeded with the generation number (reproducible).
            picks = select_convincing(
                candidates,
                k_per_problem=config.k if config.per_problem else None,
                k_total=None if config.per_problem else config.k,
                wrong_share=config.wrong_share,
                seed=run.generation.number or 0,
            )
            ordered = serving_order(picks)
            opened = generation_tasks_open(
                generation=run.generation,
                picks=[
                    Pick(solution_id=cast(int, pick.solution_id), score=pick.priority, reason=selection_reason(pick))
                    for pick in ordered
                ],
                overlap_share=config.overlap_share,
                qc_items=config.qc_items,
            )
            wrong_in_pool = sum(1 for c in candidates if c.is_correct is False)
            GenerationRun.objects.filter(pk=run.pk).update(
                selected=len(picks),
                qc_injected=opened.quality_control,
                selection_stats={
                    "candidates": len(candidates),
                    "wrong_answer_candidates": wrong_in_pool,
                    "wrong_answer_picks": sum(1 for p in picks if p.bucket == "wrong_answer"),
                    "other_picks": sum(1 for p in picks if p.bucket == "other"),
                    "picks_with_wrong_answer": sum(1 for p in picks if p.is_correct is False),
                    # Wrong-answer picks in which the checkpoint finds no step under its
                    # threshold: the solutions that fool it outright.
                    "wrong_answer_picks_passing_threshold": sum(
                        1 for p in picks if p.bucket == "wrong_answer" and p.passes is True
                    ),
                },
            )
    except Exception as error:
        generation_fail(generation_id=generation_id, error=f"selecting: {describe_error(error)}", step=_S.SELECTING)
        raise
    return len(picks)


def selection_reason(pick: Selected) -> SelectionReason:
    """Why ``select_convincing`` picked it, as the task records it: convincing, by its graded answer."""
    if pick.bucket == "uniform":
        return SelectionReason.UNIFORM
    if pick.is_correct is False:
        return SelectionReason.CONVINCING_WRONG_ANSWER
    return SelectionReason.CONVINCING_CORRECT if pick.is_correct else SelectionReason.CONVINCING_UNGRADED
