"""The state machine of a generation, and the claims on its steps.

``Generation.status`` changes only in ``generation_transition`` (a conditional UPDATE
``WHERE status = from``); a CPU step is claimed on the run's heartbeat (``run_claim``),
so two workers never run it at once.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from activelearn.generations.config import ERROR_MAX, GenerationRunningError, GenerationStateError
from activelearn.models import GenerationRun, SampleChunk, ScoreChunk, ScoreChunkStatus
from labeling.models import RUNNING_GENERATION_STATUSES, Generation, GenerationStatus

logger = logging.getLogger(__name__)

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


def stale_before(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.PIPELINE_HEARTBEAT_STALE_S)


def chunk_claim(*, model: type[ScoreChunk] | type[SampleChunk], chunk_id: int) -> str | None:
    """Claim one chunk of a step's work (scoring or sampling; both kinds share these
    statuses): PENDING, or RUNNING with a stale heartbeat (its worker died). One
    conditional UPDATE, so of two workers only one wins. The claim token, or None."""
    now = timezone.now()
    token = uuid.uuid4().hex
    claimed = (
        model.objects.filter(pk=chunk_id)
        .filter(
            Q(status=ScoreChunkStatus.PENDING) | Q(status=ScoreChunkStatus.RUNNING, heartbeat_at__lt=stale_before(now))
        )
        .update(
            status=ScoreChunkStatus.RUNNING,
            claim_token=token,
            claimed_at=now,
            heartbeat_at=now,
            attempts=F("attempts") + 1,
        )
    )
    return token if claimed == 1 else None


def run_claim(*, generation_id: int, step: str) -> GenerationRun | None:
    """Claim a CPU step of the run: succeeds on a null (never claimed) or stale heartbeat.

    The UPDATE filters on the run row only (no join): PostgreSQL re-checks those
    conditions on the row a concurrent claimer just updated, so exactly one wins.
    """
    if Generation.objects.filter(pk=generation_id, status=step).count() != 1:
        return None
    now = timezone.now()
    claimed = (
        GenerationRun.objects.filter(generation_id=generation_id)
        .filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before(now)))
        .update(heartbeat_at=now, step_attempts=F("step_attempts") + 1)
    )
    if claimed != 1:
        return None
    return GenerationRun.objects.select_related("generation", "checkpoint").get(generation_id=generation_id)


def run_heartbeat(*, run: GenerationRun, step: str, **progress: int) -> bool:
    """Refresh the claim and progress; False when the generation left ``step`` (stop)."""
    GenerationRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now(), **progress)
    return Generation.objects.filter(pk=run.generation_id, status=step).exists()


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
