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
  claimed chunks (``activelearn.generations.sampling``);
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
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, F, Max, OuterRef, Q, Sum
from django.utils import timezone

from activelearn.checkpoints import (
    OUTCOME_MIX_KEYS,
    TRAIN_CONFIG_KEYS,
    backbone_check,
    checkpoint_aggregation,
    checkpoint_create,
    checkpoint_run,
    checkpoint_threshold,
)
from activelearn.liveness import Pulse
from activelearn.models import (
    CheckpointObjective,
    CheckpointStatus,
    GenerationRun,
    PRMCheckpoint,
    SampleChunk,
    SampleChunkStatus,
    ScoreChunk,
    ScoreChunkStatus,
    SolutionSample,
    SolutionScore,
)
from activelearn.selection import PoolCandidate, Selected, select_convincing, serving_order
from annotate.celery import send_after_commit
from labeling.models import (
    RUNNING_GENERATION_STATUSES,
    Generation,
    GenerationStatus,
    GoldStep,
    Phase,
    SelectionReason,
    Solution,
    Task,
    TaskKind,
    TaskStatus,
)
from labeling.quality.control import overlap_labelers_needed
from labeling.quality.gold import quality_control_set_create

if TYPE_CHECKING:
    from activelearn.prm.scoring import Reduction

logger = logging.getLogger(__name__)

# Ids per query when reading the pool back (SQLite allows 32,766 bound parameters).
ID_PAGE = 5000
ERROR_MAX = 10_000
# Generation.number and the ids a config names are 32-bit integer columns on PostgreSQL:
# a larger value must be refused as input, not reach the database as a DataError.
INTEGER_MAX = 2**31 - 1
# Solutions one generation may select. PRM800K's generations served tens of thousands;
# a bound keeps a typo (k=10**30) from reading as "the whole pool".
K_MAX = 1_000_000
SCORE_BATCH_MAX = 4096
GRADE_TIMEOUT_MAX_S = 3600.0

SAMPLE_N_MAX = 1000

_S = GenerationStatus

# Which statuses may follow which. FAILED → a running step is a retry.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    _S.SAMPLING: frozenset({_S.REQUESTED, _S.FAILED}),
    _S.REQUESTED: frozenset({_S.TRAINING, _S.SCORING, _S.FAILED}),
    _S.TRAINING: frozenset({_S.SCORING, _S.FAILED}),
    _S.SCORING: frozenset({_S.GRADING, _S.FAILED}),
    _S.GRADING: frozenset({_S.SELECTING, _S.FAILED}),
    _S.SELECTING: frozenset({_S.OPEN, _S.FAILED}),
    _S.OPEN: frozenset({_S.CLOSED}),
    _S.FAILED: frozenset({_S.SAMPLING, _S.REQUESTED, _S.TRAINING, _S.SCORING, _S.GRADING, _S.SELECTING, _S.CLOSED}),
    _S.CLOSED: frozenset(),
}
# The run's started/finished timestamp fields per timed step.
_STEP_TIMES: dict[str, tuple[str, str]] = {
    _S.SAMPLING: ("sampling_started_at", "sampling_finished_at"),
    _S.TRAINING: ("training_started_at", "training_finished_at"),
    _S.SCORING: ("scoring_started_at", "scoring_finished_at"),
    _S.GRADING: ("grading_started_at", "grading_finished_at"),
    _S.SELECTING: ("selecting_started_at", "selecting_finished_at"),
}
RUNNING = frozenset(RUNNING_GENERATION_STATUSES)


class PipelineError(ValueError):
    """A request the pipeline refuses; the message says why."""


class GenerationConfigError(PipelineError):
    pass


class GenerationRunningError(PipelineError):
    """Another generation is already running (``generation_at_most_one_running``)."""


class GenerationNumberTakenError(PipelineError):
    pass


class GenerationStateError(PipelineError):
    """The generation is not in a status that allows the operation."""


# --- Config ----------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationConfig:
    """What one generation does; stored on ``GenerationRun.config`` as ``to_json()``."""

    # Selection: top K per problem (per_problem) or in total, wrong_share of them
    # convincing wrong-answer (activelearn.selection).
    k: int = 100
    per_problem: bool = False
    wrong_share: float = 0.8
    # The pool: solutions with steps of these problems (Problem.unique_id; None = all),
    # of this split (None = any), at most per_problem_cap per problem (lowest ids first).
    problem_ids: tuple[str, ...] | None = None
    split: str | None = None
    # None: every never-served solution; the default is settings.PIPELINE_POOL_PER_PROBLEM.
    per_problem_cap: int | None = field(default_factory=lambda: settings.PIPELINE_POOL_PER_PROBLEM or None)
    # Sample N solutions per problem from the generator first (SAMPLING_* settings), and
    # make the pool those; 0 = off, the pool is the solutions already stored.
    sample_n: int = 0
    # Gold QC items added to the generation's QC pool (labeling.quality.gold); 0 = none.
    qc_items: int = 0
    # Share of new tasks labeled twice (labeling.quality.control.overlap_labelers_needed);
    # None = settings.OVERLAP_SHARE.
    overlap_share: float | None = None
    # Training: neutral labels as their own class or folded; scoring: neutral counted as.
    neutral: str = "own"
    neutral_as: str = "positive"
    # Step scores to a solution score; "" = the checkpoint's aggregation, chosen on its
    # validation solutions (activelearn.prm.calibration), "min" for one without.
    reduction: str = ""
    # Retrain on all labels so far first; otherwise score with checkpoint_id or the
    # latest READY checkpoint.
    retrain: bool = True
    checkpoint_id: int | None = None
    base_model: str = ""  # "" = settings.PRM_BACKBONE, resolved at start
    through_generation: int | None = None  # labels trained on; None = every generation
    training: Mapping[str, Any] = field(default_factory=dict)  # TrainConfig overrides
    score_batch_size: int = 16
    grade_timeout_s: float = 5.0

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> GenerationConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise GenerationConfigError(f"unknown generation option(s): {', '.join(sorted(unknown))}")
        data = dict(values)
        if data.get("problem_ids") is not None:
            if isinstance(data["problem_ids"], str) or not all(isinstance(p, str) for p in data["problem_ids"]):
                raise GenerationConfigError("problem_ids must be a list of Problem.unique_id strings")
            data["problem_ids"] = tuple(data["problem_ids"])
        config = cls(**data)
        config.check()
        return config

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["problem_ids"] = None if self.problem_ids is None else list(self.problem_ids)
        data["training"] = dict(self.training)
        return data

    def check(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise GenerationConfigError(message)

        def integer(value: Any) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        need(integer(self.k) and 1 <= self.k <= K_MAX, f"k must be an integer in [1, {K_MAX:,}]")
        need(isinstance(self.per_problem, bool), "per_problem must be true or false")
        need(
            isinstance(self.wrong_share, int | float) and 0.0 <= self.wrong_share <= 1.0,
            "wrong_share must lie in [0, 1]",
        )
        need(
            self.split is None or self.split in {"train", "validation", "test", ""},
            "split must be train, validation, test or empty",
        )
        need(
            self.per_problem_cap is None
            or (integer(self.per_problem_cap) and 1 <= self.per_problem_cap <= INTEGER_MAX),
            f"per_problem_cap must be an integer in [1, {INTEGER_MAX}]",
        )
        need(integer(self.sample_n) and 0 <= self.sample_n <= SAMPLE_N_MAX, f"sample_n must lie in [0, {SAMPLE_N_MAX}]")
        need(
            integer(self.qc_items) and 0 <= self.qc_items <= settings.QC_ITEMS_MAX,
            f"qc_items must lie in [0, QC_ITEMS_MAX={settings.QC_ITEMS_MAX}]",
        )
        need(
            self.overlap_share is None
            or (isinstance(self.overlap_share, int | float) and 0.0 <= self.overlap_share <= 1.0),
            "overlap_share must lie in [0, 1]",
        )
        need(self.neutral in {"own", "positive", "negative"}, "neutral must be own, positive or negative")
        need(self.neutral_as in {"positive", "negative"}, "neutral_as must be positive or negative")
        need(
            self.reduction in {"", "product", "min", "mean", "last"},
            "reduction must be empty (the checkpoint's), product, min, mean or last",
        )
        need(isinstance(self.retrain, bool), "retrain must be true or false")
        need(
            self.checkpoint_id is None or (integer(self.checkpoint_id) and 1 <= self.checkpoint_id <= INTEGER_MAX),
            f"checkpoint_id must be an integer in [1, {INTEGER_MAX}]",
        )
        need(not (self.retrain and self.checkpoint_id is not None), "checkpoint_id is only used with retrain off")
        need(isinstance(self.base_model, str), "base_model must be a string")
        need(
            self.through_generation is None
            or (integer(self.through_generation) and -1 <= self.through_generation <= INTEGER_MAX),
            f"through_generation must be an integer in [-1, {INTEGER_MAX}]",
        )
        need(isinstance(self.training, Mapping), "training must be an object of TrainConfig options")
        unknown = set(self.training) - (TRAIN_CONFIG_KEYS - {"neutral"})
        need(not unknown, f"unknown training option(s): {', '.join(sorted(unknown))} (neutral has its own key)")
        # The pipeline trains on human labels and gives training no graded solutions.
        outcome = sorted(({"objective"} | OUTCOME_MIX_KEYS) & set(self.training))
        need(
            not outcome,
            f"training option(s) {', '.join(outcome)}: a generation trains a PRM on human labels; "
            "train an ORM or add outcome labels with train_prm, then reuse it with retrain off and checkpoint_id",
        )
        need(
            integer(self.score_batch_size) and 1 <= self.score_batch_size <= SCORE_BATCH_MAX,
            f"score_batch_size must be an integer in [1, {SCORE_BATCH_MAX}]",
        )
        need(
            isinstance(self.grade_timeout_s, int | float) and 0 < self.grade_timeout_s <= GRADE_TIMEOUT_MAX_S,
            f"grade_timeout_s must lie in (0, {GRADE_TIMEOUT_MAX_S:.0f}]",
        )


# --- The state machine ---------------------------------------------------------------


def generation_transition(*, generation_id: int, from_: str, to: str, error: str = "") -> bool:
    """Move the generation ``from_`` → ``to``; False when it was not in ``from_`` any more.

    Also stamps the run: the finished time of the step left, the started time of the step
    entered, and resets the step's claim (heartbeat, attempts) so its task can claim it.
    Raises GenerationRunningError when entering a running status would make two running
    generations (a retry while another generation runs).
    """
    if to not in ALLOWED_TRANSITIONS[from_]:
        raise GenerationStateError(f"a generation cannot go from {from_} to {to}")
    now = timezone.now()
    values: dict[str, Any] = {"status": to}
    run_values: dict[str, Any] = {}
    if to == _S.FAILED:
        values["error"] = run_values["error"] = error[:ERROR_MAX]
    elif from_ == _S.FAILED:
        values["error"] = run_values["error"] = ""
    if to == _S.CLOSED:
        values["finished_at"] = now
    if from_ in _STEP_TIMES and to != _S.FAILED:
        run_values[_STEP_TIMES[from_][1]] = now
    if to == _S.OPEN:
        # The run's step follows the generation out of selecting, so nothing shows "open"
        # beside "step selecting".
        run_values.update(step=to, step_started_at=now)
    if to in RUNNING:
        run_values.update(step=to, step_started_at=now, heartbeat_at=None, dispatched_at=now, step_attempts=0)
        if to in _STEP_TIMES:
            run_values[_STEP_TIMES[to][0]] = now
            run_values[_STEP_TIMES[to][1]] = None
    with transaction.atomic():
        try:
            # Its own savepoint: a constraint violation must not poison a caller's transaction.
            with transaction.atomic():
                updated = Generation.objects.filter(pk=generation_id, status=from_).update(**values)
        except IntegrityError:
            raise GenerationRunningError("another generation is running; it must open, fail or close first") from None
        if updated != 1:
            return False
        if run_values:
            GenerationRun.objects.filter(generation_id=generation_id).update(**run_values)
    # By its number, as the admin and the dashboard name it (the id is an internal key).
    number = Generation.objects.filter(pk=generation_id).values_list("number", flat=True).first()
    logger.info("generation %s: %s -> %s", number, from_, to)
    return True


def generation_fail(*, generation_id: int, error: str, step: str | None = None) -> bool:
    """Fail a running generation with ``error``; with ``step``, only if it is still in that step.

    The step guard keeps a late failure of an old step (a stale chunk finishing after a
    retry moved on) from failing the step that runs now.
    """
    for _ in range(3):
        status = Generation.objects.filter(pk=generation_id).values_list("status", flat=True).first()
        if status not in RUNNING or (step is not None and status != step):
            return False
        if generation_transition(generation_id=generation_id, from_=status, to=_S.FAILED, error=error):
            return True
    return False


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
        _reused_checkpoint(resolved)  # fail now, not in a worker
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


# --- Enqueueing ---------------------------------------------------------------------


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
            _scoring_finish(run=run)
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


# --- Claims -------------------------------------------------------------------------


def _stale_before(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.PIPELINE_HEARTBEAT_STALE_S)


def _run_claim(*, generation_id: int, step: str) -> GenerationRun | None:
    """Claim a CPU step of the run: succeeds on a null (never claimed) or stale heartbeat.

    The UPDATE filters on the run row only (no join): PostgreSQL re-checks those
    conditions on the row a concurrent claimer just updated, so exactly one wins.
    """
    if Generation.objects.filter(pk=generation_id, status=step).count() != 1:
        return None
    now = timezone.now()
    claimed = (
        GenerationRun.objects.filter(generation_id=generation_id)
        .filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=_stale_before(now)))
        .update(heartbeat_at=now, step_attempts=F("step_attempts") + 1)
    )
    if claimed != 1:
        return None
    return GenerationRun.objects.select_related("generation", "checkpoint").get(generation_id=generation_id)


def _run_heartbeat(*, run: GenerationRun, step: str, **progress: int) -> bool:
    """Refresh the claim and progress; False when the generation left ``step`` (stop)."""
    GenerationRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now(), **progress)
    return Generation.objects.filter(pk=run.generation_id, status=step).exists()


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


# --- Step: prepare (REQUESTED) -------------------------------------------------------


def _reused_checkpoint(config: GenerationConfig) -> PRMCheckpoint:
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
    run = _run_claim(generation_id=generation_id, step=_S.REQUESTED)
    if run is None:
        return
    try:
        config = GenerationConfig.from_json(run.config)
        if not config.retrain:
            checkpoint = _reused_checkpoint(config)
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
        generation_fail(generation_id=generation_id, error=_describe(error), step=_S.REQUESTED)
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
        .filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=_stale_before(now)))
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
            generation_fail(generation_id=generation_id, error=f"training: {_describe(error)}", step=_S.TRAINING)
            raise
    if checkpoint.status == CheckpointStatus.READY:
        with transaction.atomic():
            if generation_transition(generation_id=generation_id, from_=_S.TRAINING, to=_S.SCORING):
                generation_dispatch(generation_id=generation_id)


# --- Step: scoring (GPU, in chunks) -----------------------------------------------------


def pool_solution_ids(*, config: GenerationConfig, run_id: int | None = None) -> list[int]:
    """The generation's pool: scorable solutions never served as a task, capped per problem;
    with ``sample_n``, only those the run's draws became."""
    queryset = Solution.objects.filter(steps__isnull=False).exclude(
        Exists(Task.objects.filter(solution_id=OuterRef("pk")))
    )
    if config.sample_n:
        queryset = queryset.filter(Exists(SolutionSample.objects.filter(run_id=run_id, solution_id=OuterRef("pk"))))
    if config.problem_ids is not None:
        queryset = queryset.filter(problem__unique_id__in=config.problem_ids)
    if config.split is not None:
        queryset = queryset.filter(problem__split=config.split)
    ids: list[int] = []
    taken: dict[int, int] = {}
    for solution_id, problem_id in queryset.order_by("problem_id", "id").values_list("id", "problem_id").iterator():
        count = taken.get(problem_id, 0)
        if config.per_problem_cap is None or count < config.per_problem_cap:
            ids.append(solution_id)
            taken[problem_id] = count + 1
    return sorted(ids)


def score_chunks_create(*, run: GenerationRun) -> int:
    """Freeze the pool into chunks, once per run; returns how many chunks the run has."""
    with transaction.atomic():
        # Serialises concurrent dispatchers: only the first one finds no chunks.
        GenerationRun.objects.select_for_update().filter(pk=run.pk).first()
        existing = ScoreChunk.objects.filter(run=run).count()
        if existing:
            return existing
        ids = pool_solution_ids(config=GenerationConfig.from_json(run.config), run_id=run.pk)
        size = settings.PIPELINE_SCORE_CHUNK_SIZE
        chunks = [
            ScoreChunk(run=run, first_id=part[0], last_id=part[-1], solution_ids=part)
            for part in (ids[start : start + size] for start in range(0, len(ids), size))
        ]
        ScoreChunk.objects.bulk_create(chunks)
        GenerationRun.objects.filter(pk=run.pk).update(score_total=len(ids), scored=0)
        return len(chunks)


def score_chunk_run(*, chunk_id: int) -> int:
    """Score one chunk if this call can claim it; returns solutions scored by this call.

    Claimable: PENDING, or RUNNING with a stale heartbeat (its worker died). Solutions
    the checkpoint already scored are skipped, so a re-run resumes where the dead
    worker stopped.
    """
    now = timezone.now()
    token = uuid.uuid4().hex
    claimed = (
        ScoreChunk.objects.filter(pk=chunk_id)
        .filter(
            Q(status=ScoreChunkStatus.PENDING) | Q(status=ScoreChunkStatus.RUNNING, heartbeat_at__lt=_stale_before(now))
        )
        .update(
            status=ScoreChunkStatus.RUNNING,
            claim_token=token,
            claimed_at=now,
            heartbeat_at=now,
            attempts=F("attempts") + 1,
        )
    )
    if claimed != 1:
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
        from activelearn.solution_scoring import solutions_score

        # The pulse covers loading the checkpoint and every batch (activelearn.liveness).
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
                _scored_refresh(run_id=run.pk)
    except Exception as error:
        mine.update(status=ScoreChunkStatus.FAILED, error=_describe(error)[:ERROR_MAX], finished_at=timezone.now())
        generation_fail(
            generation_id=run.generation_id,
            error=f"scoring chunk {chunk.first_id}-{chunk.last_id}: {_describe(error)}",
            step=_S.SCORING,
        )
        raise
    if mine.update(status=ScoreChunkStatus.DONE, finished_at=timezone.now(), scored=len(done) + scored_here) != 1:
        return scored_here
    _scoring_finish(run=run)
    return scored_here


def _scored_refresh(*, run_id: int) -> None:
    total = ScoreChunk.objects.filter(run_id=run_id).aggregate(total=Sum("scored"))["total"] or 0
    GenerationRun.objects.filter(pk=run_id).update(scored=total)


def _scoring_finish(*, run: GenerationRun) -> None:
    """SCORING → GRADING once no chunk is left. Each finisher checks after its own
    commit, so the last one to finish always sees all done; the conditional transition
    lets only one of several simultaneous finishers advance."""
    if ScoreChunk.objects.filter(run_id=run.pk).exclude(status=ScoreChunkStatus.DONE).exists():
        return
    _scored_refresh(run_id=run.pk)
    with transaction.atomic():
        if generation_transition(generation_id=run.generation_id, from_=_S.SCORING, to=_S.GRADING):
            generation_dispatch(generation_id=run.generation_id)


def run_pool_ids(*, run: GenerationRun) -> list[int]:
    """The pool frozen by the scoring step (all chunks' solutions), in id order."""
    ids: list[int] = []
    for part in ScoreChunk.objects.filter(run=run).order_by("first_id").values_list("solution_ids", flat=True):
        ids.extend(int(i) for i in part)
    return ids


def _pages(ids: Sequence[int], size: int = ID_PAGE) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


# --- Step: grading (CPU) -----------------------------------------------------------------


def generation_grade(*, generation_id: int) -> int:
    """GRADING: grade every pool solution never graded, then → SELECTING; returns graded now."""
    run = _run_claim(generation_id=generation_id, step=_S.GRADING)
    if run is None:
        return 0
    graded_now = 0
    try:
        from activelearn.answer_grading import solutions_grade

        config = GenerationConfig.from_json(run.config)
        pool = run_pool_ids(run=run)
        GenerationRun.objects.filter(pk=run.pk).update(grade_total=len(pool))
        done = 0
        with Pulse(lambda: _run_heartbeat(run=run, step=_S.GRADING)) as pulse:
            for page in _pages(pool, settings.PIPELINE_GRADE_PAGE):
                # Never graded: a note is written by every grading, also "no reference answer".
                ungraded = list(
                    Solution.objects.filter(id__in=page, is_correct__isnull=True, grading_note="").values_list(
                        "id", flat=True
                    )
                )
                graded_now += solutions_grade(solution_ids=ungraded, timeout_s=config.grade_timeout_s)
                done += len(page)
                pulse.tick()
                if not _run_heartbeat(run=run, step=_S.GRADING, graded=done):
                    return graded_now
    except Exception as error:
        generation_fail(generation_id=generation_id, error=f"grading: {_describe(error)}", step=_S.GRADING)
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
    threshold = checkpoint_threshold(checkpoint=run.checkpoint)
    for page in _pages(run_pool_ids(run=run)):
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
                    passes=min(step_scores) >= threshold if step_scores else None,
                )
            )
    return candidates


def generation_select(*, generation_id: int) -> int:
    """SELECTING: select, create the tasks and the QC items, → OPEN; returns tasks created.

    One transaction that starts with the SELECTING → OPEN transition: a concurrent or
    redelivered selection blocks on the generation row, then finds it OPEN and does
    nothing, and a crash leaves neither tasks nor the transition behind.
    """
    run = _run_claim(generation_id=generation_id, step=_S.SELECTING)
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
            # The queue serves higher priority first (then lower id). The picks' own scores,
            # highest first, are handed out along the serving order: the queue follows it,
            # and priorities keep the scale they are compared on across open generations.
            priorities = sorted((pick.priority for pick in ordered), reverse=True)
            contents = dict(
                Solution.objects.filter(pk__in=[cast(int, p.solution_id) for p in picks]).values_list(
                    "pk", "content_sha256"
                )
            )
            Task.objects.bulk_create(
                [
                    Task(
                        generation_id=generation_id,
                        solution_id=cast(int, pick.solution_id),
                        kind=TaskKind.NORMAL,
                        priority=priority,
                        verifier_score=pick.priority,
                        labelers_needed=overlap_labelers_needed(
                            key=contents[cast(int, pick.solution_id)], share_=config.overlap_share
                        ),
                        status=TaskStatus.OPEN,
                        selection_reason=selection_reason(pick),
                    )
                    for pick, priority in zip(ordered, priorities, strict=True)
                ]
            )
            qc = _quality_control_inject(generation=run.generation, count=config.qc_items)
            wrong_in_pool = sum(1 for c in candidates if c.is_correct is False)
            GenerationRun.objects.filter(pk=run.pk).update(
                selected=len(picks),
                qc_injected=qc,
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
        generation_fail(generation_id=generation_id, error=f"selecting: {_describe(error)}", step=_S.SELECTING)
        raise
    return len(picks)


def selection_reason(pick: Selected) -> SelectionReason:
    """Why ``select_convincing`` picked it, as the task records it: convincing, by its graded answer."""
    if pick.bucket == "uniform":
        return SelectionReason.UNIFORM
    if pick.is_correct is False:
        return SelectionReason.CONVINCING_WRONG_ANSWER
    return SelectionReason.CONVINCING_CORRECT if pick.is_correct else SelectionReason.CONVINCING_UNGRADED


def _quality_control_inject(*, generation: Generation, count: int) -> int:
    """Top the generation's QC pool up to ``count`` gold items (labeling.quality.gold owns QC tasks).

    Least-used gold first, so successive generations rotate through the gold set.
    Returns the size of the QC pool; fewer than ``count`` when there is not enough gold.
    """
    if count <= 0:
        return 0
    have = set(
        Task.objects.filter(generation=generation, kind=TaskKind.QUALITY_CONTROL).values_list("solution_id", flat=True)
    )
    wanted = max(0, count - len(have))
    gold = list(
        Solution.objects.filter(Exists(GoldStep.objects.filter(solution_id=OuterRef("pk"))))
        .exclude(pk__in=have)
        .annotate(uses=Count("tasks", filter=Q(tasks__kind=TaskKind.QUALITY_CONTROL)))
        .order_by("uses", "pk")[:wanted]
    )
    if gold:
        quality_control_set_create(generation=generation, solutions=gold)
    return len(have) + len(gold)
