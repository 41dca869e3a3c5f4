"""Celery tasks of the labeling app: thin wrappers around one service call."""

from __future__ import annotations

from annotate.celery import task
from labeling.data.exportjobs import export_job_run


@task()
def run_export_job(*, job_id: int) -> None:
    """Run one ExportJob (labeling.data.exportjobs); the row records the outcome."""
    export_job_run(job_id=job_id)
