"""The configured broker is served by a real Celery worker process.

On the embedded default that is kombu's filesystem transport (no server);
in CI it is Redis (.ci/run sets CELERY_BROKER_URL).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from labeling.models import Assignment, ExportFormat, ExportJob, Generation, Labeler, Problem, Solution, Task
from labeling.tasks import run_export_job
from tests.conftest import WorkerProcess


@pytest.mark.celery_worker
def test_a_worker_process_runs_an_export_job(celery_worker_process: WorkerProcess) -> None:
    # Something to export: one submitted assignment.
    problem = Problem.objects.create(unique_id="p1", problem="What is $1+1$?", answer="2")
    solution = Solution.objects.create(problem=problem, steps=["$1+1=2$"], content_sha256="x", final_answer="2")
    task = Task.objects.create(generation=Generation.objects.create(number=0), solution=solution)
    labeler = Labeler.objects.create()
    Assignment.for_task(task, labeler=labeler, status="submitted", finish_reason="solution", total_time_ms=5).save()
    job = ExportJob.objects.create(format=ExportFormat.PRM800K)

    run_export_job.apply_async(kwargs={"job_id": job.pk}, queue=celery_worker_process.queue)

    deadline = time.monotonic() + 60
    while not job.is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
        job.refresh_from_db()
    assert job.is_finished, celery_worker_process.output()
    output = Path(job.path)
    [record] = [json.loads(line) for line in output.read_text().splitlines()]
    assert record["labeler"] == str(labeler.uuid)
    assert record["question"]["pre_generated_steps"] == ["$1+1=2$"]
    assert "succeeded" in celery_worker_process.output()
