"""What the pipeline fault tests share: the workers' settings and reads of the private database."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .conftest import connect, scenario

QUEUE = "fault-pipeline"
# Four heartbeats (one a second): a worker still loading its model on a busy CI
# machine must not look dead, or the reconciler redispatches it until it gives up.
STALE_S = 4
# A random tiny model (tests.activelearn.label_factories.TINY_CONFIG): fast on a CPU.
TINY = {"learning_rate": 1e-2, "num_epochs": 2, "batch_size": 8, "max_length": 64, "max_problem_tokens": 16,
        "warmup_ratio": 0.0, "checkpoint_every": 0, "val_fraction": 0.0, "max_steps": 2}  # fmt: skip


def pipeline_env(tmp_path: Path, broker_url: str) -> dict[str, str]:
    return {
        "CELERY_BROKER_URL": broker_url,
        "CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "PIPELINE_GPU_QUEUE": QUEUE,
        "PIPELINE_CPU_QUEUE": QUEUE,
        "PIPELINE_HEARTBEAT_STALE_S": str(STALE_S),
        "PIPELINE_HEARTBEAT_EVERY_S": "1",
        # These tests drive the reconciler themselves (test_fault_worker_restart covers
        # the worker's own pass at start).
        "PIPELINE_RECONCILE_AT_WORKER_START": "false",
        "PIPELINE_SCORE_CHUNK_SIZE": "3",
        "PIPELINE_SCORE_BATCH": "1",
    }


def one(database_url: str, sql: str, params: list[Any] | None = None) -> Any:
    with connect(database_url) as db:
        row = db.execute(sql, params or []).fetchone()
    return None if row is None else (row[0] if len(row) == 1 else row)


def generation_status(database_url: str, generation: int) -> str:
    return str(one(database_url, "SELECT status FROM labeling_generation WHERE id = %s", [generation]))


def generation_error(database_url: str, generation: int) -> str:
    return str(one(database_url, "SELECT error FROM labeling_generation WHERE id = %s", [generation]))


def reconcile_until_open(database_url: str, generation: int, env: dict[str, str], *, timeout: float) -> list[Any]:
    """Run the reconciler as beat would (but every couple of seconds) until the generation settles."""
    reports = []
    deadline = time.monotonic() + timeout
    while generation_status(database_url, generation) not in ("open", "failed"):
        assert time.monotonic() < deadline, f"generation stuck in {generation_status(database_url, generation)}"
        reports.append(scenario(database_url, "reconcile", env=env))
        time.sleep(STALE_S)
    return reports


def assert_completed_once(database_url: str, generation: int, *, pool: int) -> None:
    """OPEN, one checkpoint, one score per pool solution, every chunk done, no solution tasked twice."""
    with connect(database_url) as db:
        status, error = db.execute(
            "SELECT status, error FROM labeling_generation WHERE id = %s", [generation]
        ).fetchone()
        assert status == "open", error
        checkpoint = db.execute("SELECT checkpoint_id FROM activelearn_generationrun WHERE generation_id = %s",
                                [generation]).fetchone()[0]  # fmt: skip
        assert db.execute("SELECT count(*) FROM activelearn_prmcheckpoint").fetchone()[0] == 1
        scores = db.execute("SELECT count(*), count(DISTINCT solution_id) FROM activelearn_solutionscore"
                            " WHERE checkpoint_id = %s", [checkpoint]).fetchone()  # fmt: skip
        assert scores == (pool, pool)
        assert db.execute("SELECT count(*) FROM activelearn_scorechunk WHERE status <> 'done'").fetchone()[0] == 0
        tasks = db.execute("SELECT count(*), count(DISTINCT solution_id) FROM labeling_task WHERE generation_id = %s",
                           [generation]).fetchone()  # fmt: skip
        assert tasks[0] > 0 and tasks[0] == tasks[1]
