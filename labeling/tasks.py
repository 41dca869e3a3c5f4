"""Celery tasks of the labeling app: thin wrappers around one service call."""

from __future__ import annotations

from celery import shared_task

from labeling.data.exportjobs import export_job_run


@shared_task(acks_late=True, reject_on_worker_lost=True)  # type: ignore[untyped-decorator]
def run_export_job(*, job_id: int) -> None:
    """Run one ExportJob (labeling.exportjobs); the row records the outcome."""
    export_job_run(job_id=job_id)
