"""Export jobs: an export asked for in a request and run by a Celery worker.

A request only creates the ExportJob row (QUEUED) and sends
``labeling.tasks.run_export_job`` after commit; the worker claims the row
(RUNNING), writes the file with the same streaming, snapshot-consistent code
as the management commands, and records the manifest (DONE) or the error
(FAILED). Progress is written while the export runs so the dashboard's status
card can show it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from annotate.celery import send_after_commit
from labeling.data.exports import ExportFilters, prm800k_export
from labeling.data.files import ExportResult
from labeling.data.stepwise import Neutral, stepwise_export
from labeling.models import Assignment, ExportFormat, ExportJob, ExportJobStatus

_SUFFIX = {ExportFormat.PRM800K: ".jsonl", ExportFormat.STEPWISE: ".stepwise.jsonl", ExportFormat.PARQUET: ".parquet"}
# How often a running export writes its progress (seconds).
PROGRESS_INTERVAL_S = 1.0


class ExportJobInvalid(ValueError):
    """The options of an export request do not make a valid export."""


def export_filters_from_dict(options: dict[str, Any]) -> ExportFilters:
    known = {f.name for f in dataclasses.fields(ExportFilters)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ExportJobInvalid(f"unknown filter(s): {', '.join(unknown)}")
    values = dict(options)
    values["generations"] = tuple(values.get("generations", ()))
    return ExportFilters(**values)


def export_job_create(
    *,
    export_format: ExportFormat,
    filters: ExportFilters,
    neutral: Neutral = Neutral.POSITIVE,
    requested_by: User | None,
) -> ExportJob:
    """Record the request and enqueue its run after commit (never run in the request)."""
    stored: dict[str, Any] = {**dataclasses.asdict(filters), "generations": list(filters.generations)}
    if export_format != ExportFormat.PRM800K:
        stored["neutral"] = neutral.value
    job = ExportJob.objects.create(format=export_format, filters=stored, requested_by=requested_by)
    send_after_commit("labeling.tasks.run_export_job", kwargs={"job_id": job.pk})
    return job


def _claim(job_id: int, *, now: Any) -> bool:
    # QUEUED → RUNNING, or RUNNING again: a message redelivered after its
    # worker died (acks_late + reject_on_worker_lost) must be able to finish
    # the job. Files are written to a temporary name and renamed, so a rerun
    # never exposes a half-written file. DONE and FAILED rows are left alone.
    return (
        ExportJob.objects.filter(pk=job_id, status__in=[ExportJobStatus.QUEUED, ExportJobStatus.RUNNING]).update(
            status=ExportJobStatus.RUNNING, started_at=now, progress=0, error=""
        )
        == 1
    )


def export_job_run(*, job_id: int) -> ExportJob | None:
    """Run one job in this process; None when it was already finished (a duplicate message)."""
    if not _claim(job_id, now=timezone.now()):
        return None
    job = ExportJob.objects.get(pk=job_id)
    options = dict(job.filters)
    neutral = Neutral(options.pop("neutral", Neutral.POSITIVE.value))
    try:
        filters = export_filters_from_dict(options)
        total = Assignment.objects.filter(filters.as_q()).count()
        ExportJob.objects.filter(pk=job_id).update(total=total)
        target = Path(settings.EXPORT_DIR) / f"export-{job_id}{_SUFFIX[ExportFormat(job.format)]}"
        reporter = _ProgressReporter(job_id, live=not connection.in_atomic_block)
        result = _write(ExportFormat(job.format), target=target, filters=filters, neutral=neutral, progress=reporter)
    except Exception as exc:
        ExportJob.objects.filter(pk=job_id).update(
            status=ExportJobStatus.FAILED, error=f"{type(exc).__name__}: {exc}", finished_at=timezone.now()
        )
        raise
    ExportJob.objects.filter(pk=job_id).update(
        status=ExportJobStatus.DONE,
        path=str(result.path),
        records=result.records,
        sha256=result.sha256,
        progress=reporter.count,
        finished_at=timezone.now(),
    )
    return ExportJob.objects.get(pk=job_id)


def _write(
    export_format: ExportFormat,
    *,
    target: Path,
    filters: ExportFilters,
    neutral: Neutral,
    progress: Callable[[int], object],
) -> ExportResult:
    if export_format == ExportFormat.PRM800K:
        return prm800k_export(output=str(target), filters=filters, progress=progress)
    return stepwise_export(
        output=str(target),
        filters=filters,
        neutral=neutral,
        parquet=export_format == ExportFormat.PARQUET,
        progress=progress,
    )


class _ProgressReporter:
    """Counts records and writes the count to the job row about once a second.

    The export reads inside a snapshot transaction (read-only on PostgreSQL,
    a read lock on SQLite) that this connection cannot write in, so each
    update runs in a short-lived thread, which Django gives its own
    connection, and commits on its own. Called inside a caller's transaction
    (``live`` false), the row is not visible to another connection yet and
    SQLite's write lock is held, so only the final count is written.
    """

    def __init__(self, job_id: int, *, live: bool) -> None:
        self.job_id = job_id
        self.live = live
        self.count = 0
        self._last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if self.live and now - self._last >= PROGRESS_INTERVAL_S:
            self._last = now
            thread = threading.Thread(target=_write_progress, args=(self.job_id, self.count), daemon=True)
            thread.start()
            thread.join()


def _write_progress(job_id: int, count: int) -> None:
    try:
        ExportJob.objects.filter(pk=job_id).update(progress=count)
    finally:
        connection.close()


def export_job_file(job: ExportJob) -> Path | None:
    """The finished file of a DONE job, if it is still there."""
    if job.status != ExportJobStatus.DONE or not job.path:
        return None
    path = Path(job.path)
    return path if path.is_file() else None


def export_job_percent(job: ExportJob) -> int | None:
    if job.status == ExportJobStatus.DONE:
        return 100
    if not job.total:
        return None
    return min(99, int(100 * job.progress / job.total))
