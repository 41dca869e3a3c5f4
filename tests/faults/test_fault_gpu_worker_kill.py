"""SIGKILL the GPU worker mid-training; a new worker and the reconciler resume from the last checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

from .conftest import kill_group, scenario, wait_for
from .pipeline_stack import (
    STALE_S,
    TINY,
    assert_completed_once,
    generation_error,
    generation_status,
    one,
    pipeline_env,
    reconcile_until_open,
)

POOL = 12
TRAINING = {**TINY, "num_epochs": 100, "max_steps": 200, "checkpoint_every": 10, "keep_checkpoints": 2, "batch_size": 2}


def saved_steps(output_dir: Path) -> list[int]:
    if not output_dir.is_dir():
        return []
    return sorted(int(p.name.rsplit("-", 1)[1]) for p in output_dir.glob("checkpoint-*") if p.is_dir())


def test_a_worker_killed_mid_training_is_resumed_from_its_last_checkpoint(
    fault_db, private_redis, celery_worker, tmp_path
):
    env = pipeline_env(tmp_path, private_redis.url)
    queue = env["PIPELINE_GPU_QUEUE"]
    first = celery_worker(fault_db, private_redis.url, queue, **env)
    created = scenario(fault_db, "pipeline", stage="training", training=TRAINING, problems=3, per_problem=4, env=env)
    generation = created["generation"]
    # generation_start queues its prepare step too: on a busy machine that
    # message may hold the claim while the scenario's own prepare returns, so
    # the generation reaches TRAINING a moment later, by either of them.
    wait_for(
        lambda: generation_status(fault_db, generation) == "training",
        timeout=60, what=f"the generation to reach training (at {created['status']})", poll=0.05,
    )  # fmt: skip

    output_dir = wait_for(
        lambda: one(fault_db, "SELECT output_dir FROM activelearn_prmcheckpoint WHERE steps_done > 0"),
        timeout=90, what=f"training to start:\n{first.output()}", poll=0.05,
    )  # fmt: skip
    wait_for(lambda: saved_steps(Path(output_dir)), timeout=90, what="a saved checkpoint", poll=0.02)
    kill_group(first.process)
    first.process.wait()
    saved = saved_steps(Path(output_dir))
    steps_at_kill = one(fault_db, "SELECT steps_done FROM activelearn_prmcheckpoint")
    assert saved and saved[-1] < TRAINING["max_steps"], "killed too late: training had finished"
    assert one(fault_db, "SELECT status FROM activelearn_prmcheckpoint") == "training"

    celery_worker(fault_db, private_redis.url, queue, **env)
    # The killed worker's message waits for the visibility timeout (hours); the reconciler
    # notices the stale heartbeat and dispatches training again.
    time.sleep(STALE_S + 0.5)
    reports = reconcile_until_open(fault_db, generation, env, timeout=400)
    assert reports and reports[0]["redispatched"] == [generation], reports

    status, steps_done, metrics = one(fault_db, "SELECT status, steps_done, metrics FROM activelearn_prmcheckpoint")
    assert status == "ready", (generation_status(fault_db, generation), generation_error(fault_db, generation), reports)
    assert steps_done == TRAINING["max_steps"]
    # Resumed from the newest checkpoint on disk at the kill (or a later one it saved
    # while dying), never from scratch.
    assert metrics["resumed_from_step"] >= saved[-1] > 0, (metrics["resumed_from_step"], saved, steps_at_kill)
    assert_completed_once(fault_db, generation, pool=POOL)
