"""Model-generated candidate steps, per (assignment, step): the store beside its table, and asking for them.

Generation never runs in a web request. ``candidates_prefetch`` claims the
(assignment, step) slot in the store and, after the surrounding transaction
commits, sends the step generator's task (``GENERATE_TASK``, in
activelearn.tasks) on ``STEPGEN_QUEUE``. The worker stores the candidates or
the error here; a page reads them with ``candidates_get`` and polls while the
slot is pending.

Storage sits behind ``CandidateStore``: ``DatabaseCandidateStore`` (the
default, table ``labeling.StepCandidateSet``) is shared by the web and the
workers; ``InMemoryCandidateStore`` serves tests and a single-process setup.
The store is chosen with ``STEPGEN_CANDIDATE_STORE``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from annotate.celery import send_after_commit
from labeling.models import CandidateSetStatus, StepCandidateSet

# Sent by name: the generator is activelearn's, which labeling does not import.
# The name is older than the task's module and is kept for messages in flight.
GENERATE_TASK = "activelearn.stepgen_service.generate_step_candidates"


@dataclass(frozen=True)
class StoredCandidates:
    assignment_id: int
    step_index: int
    status: CandidateSetStatus
    texts: tuple[str, ...] = ()
    # How the texts were sampled (the generator's settings, drop counts).
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

    def save_ready(
        self, *, assignment_id: int, step_index: int, texts: Sequence[str], sampling: Mapping[str, Any], now: datetime
    ) -> None:
        """Store the generated texts, and how they were sampled (settings, drop counts)."""
        ...

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
            if row is not None and row.status == CandidateSetStatus.READY:
                return False
            fresh = row is not None and row.updated_at is not None and row.updated_at >= stale_before
            if row is not None and row.status == CandidateSetStatus.PENDING and fresh:
                return False
            self._rows[(assignment_id, step_index)] = StoredCandidates(
                assignment_id, step_index, CandidateSetStatus.PENDING, updated_at=now
            )
            return True

    def save_ready(
        self, *, assignment_id: int, step_index: int, texts: Sequence[str], sampling: Mapping[str, Any], now: datetime
    ) -> None:
        with self._lock:
            self._rows[(assignment_id, step_index)] = StoredCandidates(
                assignment_id,
                step_index,
                CandidateSetStatus.READY,
                texts=tuple(texts),
                sampling=dict(sampling),
                updated_at=now,
            )

    def save_failed(self, *, assignment_id: int, step_index: int, error: str, now: datetime) -> None:
        with self._lock:
            self._rows[(assignment_id, step_index)] = StoredCandidates(
                assignment_id, step_index, CandidateSetStatus.FAILED, error=error, updated_at=now
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
            CandidateSetStatus(row.status),
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
                    CandidateSetStatus.PENDING.value,
                    adapt(now),
                    adapt(now),
                    CandidateSetStatus.FAILED.value,
                    CandidateSetStatus.PENDING.value,
                    adapt(stale_before),
                ],
            )
            return cursor.fetchone() is not None

    def save_ready(
        self, *, assignment_id: int, step_index: int, texts: Sequence[str], sampling: Mapping[str, Any], now: datetime
    ) -> None:
        self._save(
            assignment_id,
            step_index,
            now,
            status=CandidateSetStatus.READY,
            texts=list(texts),
            sampling=dict(sampling),
            error="",
        )

    def save_failed(self, *, assignment_id: int, step_index: int, error: str, now: datetime) -> None:
        self._save(assignment_id, step_index, now, status=CandidateSetStatus.FAILED, texts=[], sampling={}, error=error)

    def _save(self, assignment_id: int, step_index: int, now: datetime, **values: Any) -> None:
        # Never over a ready set: a labeler may already be rating those texts
        # (a duplicate task delivery after a stale re-claim finishes second).
        updated = (
            StepCandidateSet.objects.filter(assignment_id=assignment_id, step_index=step_index)
            .exclude(status=CandidateSetStatus.READY)
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
    send_after_commit(
        GENERATE_TASK, kwargs={"assignment_id": assignment_id, "step_index": step_index}, queue=settings.STEPGEN_QUEUE
    )
    return True
