"""Restart Redis (private, no persistence) while a worker is connected and scoring chunks are queued."""

from __future__ import annotations

import subprocess

from .conftest import connect, scenario, wait_for
from .pipeline_stack import TINY, assert_completed_once, pipeline_env, reconcile_until_open

POOL = 12  # 3 problems x 4 solutions: 4 chunks of 3


def redis_keys(port: int) -> int:
    out = subprocess.run(["redis-cli", "-p", str(port), "dbsize"], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_a_redis_restart_loses_queued_chunks_and_the_reconciler_finishes_the_generation(
    fault_db, private_redis, celery_worker, tmp_path
):
    env = pipeline_env(tmp_path, private_redis.url)
    created = scenario(fault_db, "pipeline", stage="scoring", training=TINY, problems=3, per_problem=4, env=env)
    generation = created["generation"]
    assert created["status"] == "scoring"
    # Started once the scenario trained the model itself: a worker already
    # listening took the training message the scenario's prepare sends, and
    # the scenario's own training then found the step claimed and stayed in
    # "training" (seen on a busy machine).
    worker = celery_worker(fault_db, private_redis.url, env["PIPELINE_GPU_QUEUE"], **env)

    # The worker holds one chunk (prefetch 1, solo pool); the others wait in Redis.
    def running() -> bool:
        with connect(fault_db) as db:
            return bool(
                db.execute("SELECT count(*) FROM activelearn_scorechunk WHERE status = 'running'").fetchone()[0]
            )

    wait_for(running, timeout=60, what=f"a chunk to start:\n{worker.output()}", poll=0.05)
    assert redis_keys(private_redis.port) > 0
    private_redis.restart()
    assert redis_keys(private_redis.port) == 0, "the restart should have lost the queued messages"
    with connect(fault_db) as db:
        pending = db.execute("SELECT count(*) FROM activelearn_scorechunk WHERE status = 'pending'").fetchone()[0]
    assert pending > 0

    # The connected worker reconnects; the reconciler re-sends what the restart lost.
    reports = reconcile_until_open(fault_db, generation, env, timeout=150)
    assert any(r["chunks_requeued"] for r in reports), reports
    assert worker.process.poll() is None, worker.output()
    assert_completed_once(fault_db, generation, pool=POOL)
