"""Step generation, Django side: settings -> generator, the prefetch task, candidate storage.

Generation never runs in a web request. ``candidates_prefetch`` claims the
(assignment, step) slot in the candidate store and, after the surrounding transaction
commits, enqueues ``generate_step_candidates`` on ``STEPGEN_QUEUE`` ("gpu" for the
local backend, "cpu" for the HTTP one). The task calls ``candidates_generate``, which
reads the solution prefix, asks the generator and stores the candidates or the error.
A page later reads them with ``candidates_get`` and polls while the status is pending.

Storage sits behind ``CandidateStore``: ``DatabaseCandidateStore`` (the default, table
``labeling.StepCandidateSet``) is shared by the web and the workers;
``InMemoryCandidateStore`` serves tests and a single-process setup. The store is chosen
with ``STEPGEN_CANDIDATE_STORE``.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from activelearn.stepgen.base import (
    PromptTemplate,
    SamplingParams,
    StepCandidates,
    StepGenerationError,
    StepGenerator,
)
from activelearn.stepgen.openai_http import OpenAICompletionsGenerator
from annotate.celery import task
from labeling.models import Assignment, CandidateSetStatus, LabeledStep, StepCandidateSet

logger = logging.getLogger(__name__)


# The status of a candidate slot; the same choices as the StepCandidateSet table.
CandidateStatus = CandidateSetStatus


@dataclass(frozen=True)
class StoredCandidates:
    assignment_id: int
    step_index: int
    status: CandidateStatus
    texts: tuple[str, ...] = ()
    # StepCandidates.as_dict() minus the texts: sampling settings and drop counts.
    sampling: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    updated_at: datetime | None = None


class CandidateStore(Protocol):
    def get(self, *, assignment_id: int, step_index: int) -> StoredCandidates | None: ...

    def claim(self, *, assignment_id: int, step_index: int, now: datetime, stale_before: datetime) -> bool:
        """Mark the slot pending; False if it is ready or pending since ``stale_before`` or later.

        A database store does this with one conditional upsert, so that two prefetches
        of the same slot enqueue one task.
        """
        ...

    def save_ready(self, *, assignment_id: int, step_index: int, candidates: StepCandidates, now: datetime) -> None: ...

    def save_failed(self, *, assignment_id: int, step_index: int, error: str, now: datetime) -> None: ...


class InMemoryCandidateStore:
    """Per-process store for tests and single-process runs; the web and a worker do not share it."""

    def __init__(self) -> None:
        self._rows: dict[tuple[int, int], StoredCandidates] = {}
        self._lock = threading.Lock()

    def get(self, *, assignment_id: int, step_index: int) -> StoredCandidates | None:
        with self._lock:
            return self._rows.get((assignment_id, step_index))

    def claim(self, *, assignment_id: int, step_index: int, now: datetime, stale_before: datetime) -> bool:
        with self._lock:
            row = self._rows.get((assignment_id, step_index))
            if row is not None and row.status == CandidateStatus.READY:
                return False
            fresh = row is not None and row.updated_at is not None and row.updated_at >= stale_before
            if row is not None and row.status == CandidateStatus.PENDING and fresh:
                return False
            self._rows[(assignment_id, step_index)] = StoredCandidates(
                assignment_id, step_index, CandidateStatus.PENDING, updated_at=now
            )
            return True

    def save_ready(self, *, assignment_id: int, step_index: int, candidates: StepCandidates, now: datetime) -> None:
        details = candidates.as_dict()
        texts = tuple(details.pop("texts"))
        with self._lock:
            self._rows[(assignment_id, step_index)] = StoredCandidates(
                assignment_id, step_index, CandidateStatus.READY, texts=texts, sampling=details, updated_at=now
            )

    def save_failed(self, *, assignment_id: int, step_index: int, error: str, now: datetime) -> None:
        with self._lock:
            self._rows[(assignment_id, step_index)] = StoredCandidates(
                assignment_id, step_index, CandidateStatus.FAILED, error=error, updated_at=now
            )


class DatabaseCandidateStore:
    """``labeling.StepCandidateSet`` rows: shared by the web and every worker."""

    def get(self, *, assignment_id: int, step_index: int) -> StoredCandidates | None:
        row = StepCandidateSet.objects.filter(assignment_id=assignment_id, step_index=step_index).first()
        if row is None:
            return None
        return StoredCandidates(
            assignment_id,
            step_index,
            CandidateStatus(row.status),
            texts=tuple(row.texts),
            sampling=dict(row.sampling),
            error=row.error,
            updated_at=row.updated_at,
        )

    def claim(self, *, assignment_id: int, step_index: int, now: datetime, stale_before: datetime) -> bool:
        # One statement, so two prefetches of the same slot cannot both win: the
        # unique (assignment, step_index) key makes the second insert an update,
        # and the WHERE lets it through only for a failed slot or a pending one
        # whose worker is presumed lost. RETURNING tells whether a row was
        # written (SQLite >= 3.35 and PostgreSQL both have it).
        table = StepCandidateSet._meta.db_table
        adapt = connection.ops.adapt_datetimefield_value
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table}"
                " (assignment_id, step_index, status, texts, sampling, error, created_at, updated_at)"
                " VALUES (%s, %s, %s, '[]', '{}', '', %s, %s)"
                " ON CONFLICT (assignment_id, step_index) DO UPDATE SET status = EXCLUDED.status,"
                " texts = EXCLUDED.texts, sampling = EXCLUDED.sampling, error = '', updated_at = EXCLUDED.updated_at"
                f" WHERE {table}.status = %s OR ({table}.status = %s AND {table}.updated_at < %s)"
                " RETURNING id",
                [
                    assignment_id,
                    step_index,
                    CandidateStatus.PENDING.value,
                    adapt(now),
                    adapt(now),
                    CandidateStatus.FAILED.value,
                    CandidateStatus.PENDING.value,
                    adapt(stale_before),
                ],
            )
            return cursor.fetchone() is not None

    def save_ready(self, *, assignment_id: int, step_index: int, candidates: StepCandidates, now: datetime) -> None:
        details = candidates.as_dict()
        texts = list(details.pop("texts"))
        self._save(
            assignment_id, step_index, now, status=CandidateStatus.READY, texts=texts, sampling=details, error=""
        )

    def save_failed(self, *, assignment_id: int, step_index: int, error: str, now: datetime) -> None:
        self._save(assignment_id, step_index, now, status=CandidateStatus.FAILED, texts=[], sampling={}, error=error)

    def _save(self, assignment_id: int, step_index: int, now: datetime, **values: Any) -> None:
        # Never over a ready set: a labeler may already be rating those texts
        # (a duplicate task delivery after a stale re-claim finishes second).
        updated = (
            StepCandidateSet.objects.filter(assignment_id=assignment_id, step_index=step_index)
            .exclude(status=CandidateStatus.READY)
            .update(updated_at=now, **values)
        )
        if updated:
            return
        # The slot was never claimed (candidates_generate called directly):
        # create it; a concurrent writer of the same slot wins and we lose.
        with transaction.atomic():
            StepCandidateSet.objects.get_or_create(
                assignment_id=assignment_id,
                step_index=step_index,
                defaults={**values, "created_at": now, "updated_at": now},
            )


@functools.cache
def _store_instance(path: str) -> CandidateStore:
    store: CandidateStore = import_string(path)()
    return store


def candidate_store() -> CandidateStore:
    """The process-wide store named by ``STEPGEN_CANDIDATE_STORE``."""
    return _store_instance(settings.STEPGEN_CANDIDATE_STORE)


def _sampling_params() -> SamplingParams:
    return SamplingParams(
        k=settings.STEPGEN_K,
        temperature=settings.STEPGEN_TEMPERATURE,
        top_p=settings.STEPGEN_TOP_P,
        max_tokens=settings.STEPGEN_MAX_TOKENS,
        seed=settings.STEPGEN_SEED,
    )


def _prompt_template() -> PromptTemplate:
    path = settings.STEPGEN_PROMPT_TEMPLATE_FILE
    return PromptTemplate(Path(path).read_text(encoding="utf-8")) if path else PromptTemplate()


@functools.cache
def _generator_for(backend: str, key: tuple[Any, ...]) -> StepGenerator:
    # Keyed on every setting it reads, so override_settings in tests gets a fresh one
    # while a worker loads a local model once.
    if backend == "openai":
        return OpenAICompletionsGenerator(
            base_url=settings.STEPGEN_OPENAI_BASE_URL,
            model=settings.STEPGEN_OPENAI_MODEL,
            api_key=settings.STEPGEN_OPENAI_API_KEY,
            params=_sampling_params(),
            prompt_template=_prompt_template(),
            timeout_s=settings.STEPGEN_TIMEOUT_S,
            retries=settings.STEPGEN_RETRIES,
        )
    # Imported here: torch is loaded only in processes that run the local model.
    from activelearn.stepgen.local_lm import LocalLMGenerator

    return LocalLMGenerator.from_directory(
        settings.STEPGEN_LOCAL_MODEL_DIR,
        device=settings.STEPGEN_LOCAL_DEVICE or None,
        params=_sampling_params(),
        prompt_template=_prompt_template(),
    )


def step_generator() -> StepGenerator | None:
    """The configured generator, or None when ``STEPGEN_BACKEND`` is "none"."""
    backend = settings.STEPGEN_BACKEND
    if backend == "none":
        return None
    key = tuple(getattr(settings, name) for name in sorted(dir(settings)) if name.startswith("STEPGEN_"))
    return _generator_for(backend, key)


class StepPrefixError(ValueError):
    """The steps before ``step_index`` are not known yet."""


def step_prefix(*, assignment_id: int, step_index: int) -> tuple[str, list[str]]:
    """The problem and the steps before ``step_index`` of an assignment's trajectory.

    Phase 2: the pre-generated steps. Phase 1 (solution without steps): the steps the
    labeler continued with, i.e. the chosen completion or their own step at each index.
    """
    assignment = Assignment.objects.select_related("task__solution__problem").get(pk=assignment_id)
    solution = assignment.task.solution
    problem = solution.problem.problem
    if solution.steps is not None:
        if step_index > len(solution.steps):
            raise StepPrefixError(f"solution {solution.pk} has {len(solution.steps)} steps, not {step_index}")
        return problem, list(solution.steps[:step_index])
    labeled = list(
        LabeledStep.objects.filter(assignment_id=assignment_id, index__lt=step_index)
        .prefetch_related("ratings")
        .order_by("index")
    )
    steps: list[str] = []
    for expected, step in enumerate(labeled):
        if step.index != expected:
            raise StepPrefixError(f"assignment {assignment_id} has no step {expected} yet")
        if step.chosen_completion is None:
            if step.human_completion is None:
                raise StepPrefixError(f"assignment {assignment_id} step {expected} has no chosen step")
            steps.append(step.human_completion)
            continue
        texts = {rating.completion_index: rating.text for rating in step.ratings.all()}
        if step.chosen_completion not in texts:
            raise StepPrefixError(f"assignment {assignment_id} step {expected} chose a completion it does not have")
        steps.append(texts[step.chosen_completion])
    if len(steps) != step_index:
        raise StepPrefixError(f"assignment {assignment_id} has {len(steps)} steps before step {step_index}")
    return problem, steps


def candidates_get(
    *, assignment_id: int, step_index: int, store: CandidateStore | None = None
) -> StoredCandidates | None:
    return (store or candidate_store()).get(assignment_id=assignment_id, step_index=step_index)


def candidates_prefetch(
    *, assignment_id: int, step_index: int, store: CandidateStore | None = None, now: datetime | None = None
) -> bool:
    """Start computing candidates for (assignment, step) in a worker; True if a task was queued.

    Nothing is queued when generation is off, or the slot is ready or already pending
    (a pending slot older than ``STEPGEN_PENDING_TIMEOUT_S`` counts as lost and is
    claimed again).
    """
    if settings.STEPGEN_BACKEND == "none":
        return False
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=settings.STEPGEN_PENDING_TIMEOUT_S)
    claimed = (store or candidate_store()).claim(
        assignment_id=assignment_id, step_index=step_index, now=now, stale_before=stale_before
    )
    if not claimed:
        return False
    kwargs = {"assignment_id": assignment_id, "step_index": step_index}
    # After commit: a worker must not look for rows this transaction has not written yet.
    transaction.on_commit(lambda: generate_step_candidates.apply_async(kwargs=kwargs, queue=settings.STEPGEN_QUEUE))
    return True


def candidates_generate(
    *,
    assignment_id: int,
    step_index: int,
    store: CandidateStore | None = None,
    generator: StepGenerator | None = None,
) -> StoredCandidates:
    """Generate and store candidates for (assignment, step); a failure is stored, not raised."""
    store = store or candidate_store()
    generator = generator or step_generator()
    if generator is None:
        raise StepGenerationError("STEPGEN_BACKEND is 'none': step generation is switched off")
    try:
        problem, steps = step_prefix(assignment_id=assignment_id, step_index=step_index)
        candidates = generator.generate(problem=problem, steps=steps)
    except (StepGenerationError, StepPrefixError, Assignment.DoesNotExist) as exc:
        logger.warning("step candidates for assignment %s step %s failed: %s", assignment_id, step_index, exc)
        store.save_failed(assignment_id=assignment_id, step_index=step_index, error=str(exc), now=timezone.now())
    else:
        store.save_ready(assignment_id=assignment_id, step_index=step_index, candidates=candidates, now=timezone.now())
    stored = store.get(assignment_id=assignment_id, step_index=step_index)
    if stored is None:
        raise RuntimeError(f"candidate store lost assignment {assignment_id} step {step_index} right after saving it")
    return stored


@task()
def generate_step_candidates(*, assignment_id: int, step_index: int) -> str:
    """Thin: compute and store candidates for one (assignment, step)."""
    return candidates_generate(assignment_id=assignment_id, step_index=step_index).status
