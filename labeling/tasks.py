"""Celery tasks of the labeling app: thin wrappers around one service call."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from labeling.data.exportjobs import export_job_run
from labeling.data.exports import ExportFilters, prm800k_export


@shared_task(acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
def export_prm800k_file(*, output: str, filters: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write an export file in a worker (never inside a web request)."""
    options = dict(filters or {})
    options["generations"] = tuple(options.get("generations", ()))
    result = prm800k_export(output=output, filters=ExportFilters(**options))
    return {"path": str(result.path), "records": result.records, "sha256": result.sha256}


@shared_task(acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
def run_export_job(*, job_id: int) -> None:
    """Run one ExportJob (labeling.exportjobs); the row records the outcome."""
    export_job_run(job_id=job_id)
