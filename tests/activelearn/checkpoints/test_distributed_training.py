"""A generation's training step over several processes: a killed process fails the step
with a clear error, and a retry resumes from the last checkpoint and finishes."""

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from activelearn.generations import steps
from activelearn.generations.pipeline import generation_retry, generation_start
from activelearn.models import CheckpointStatus
from activelearn.prm.distributed import EVENTS_FILE, DistributedTrainingError
from labeling.models import GenerationStatus as S
from tests.activelearn.pipeline_factories import TINY_TRAINING, config, drive, labels, pool

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

TWO_PROCESSES = {
    **TINY_TRAINING,
    "processes": 2,
    "cpu": True,
    "adapter": "full",
    "batch_size": 2,
    "checkpoint_every": 1,
    "num_epochs": 2,
    "max_steps": 6,
}


def _kill_rank_one_after_a_checkpoint(output_dir: Path, killed: list[int]) -> None:
    """SIGKILL training process 1 once the main process reported an optimizer step (a
    checkpoint is written before each report)."""
    events = output_dir / EVENTS_FILE
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if events.exists() and events.read_text().count('"step"') >= 1:
            for child in psutil.Process(os.getpid()).children(recursive=True):
                try:
                    if child.environ().get("RANK") == "1" and child.environ().get("LOCAL_RANK") == "1":
                        child.send_signal(signal.SIGKILL)
                        killed.append(child.pid)
                        return
                except psutil.Error:
                    continue
        time.sleep(0.1)


def _training_processes() -> list[psutil.Process]:
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if "RANK" in child.environ() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_a_killed_training_process_fails_the_step_and_a_retry_resumes_it(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    pool(problems=2, per_problem=4)
    labels(24)
    generation = generation_start(config=config(k=3, base_model="tiny:llama", training=TWO_PROCESSES))
    steps.generation_prepare(generation_id=generation.pk)
    generation.refresh_from_db()
    checkpoint = generation.run.checkpoint
    killed: list[int] = []
    killer = threading.Thread(
        target=_kill_rank_one_after_a_checkpoint, args=(Path(checkpoint.output_dir), killed), daemon=True
    )
    killer.start()

    with pytest.raises(DistributedTrainingError, match="training process 1 killed by SIGKILL"):
        steps.generation_train(generation_id=generation.pk)
    killer.join()

    generation.refresh_from_db()
    checkpoint.refresh_from_db()
    assert killed and generation.status == S.FAILED
    assert "training: DistributedTrainingError: distributed training over 2 processes failed" in generation.error
    assert checkpoint.status == CheckpointStatus.FAILED and "killed by SIGKILL" in checkpoint.error
    assert not _training_processes()  # the launcher stopped the other process and exited

    generation = generation_retry(generation_id=generation.pk)
    generation = drive(generation)
    checkpoint.refresh_from_db()
    assert generation.status == S.OPEN
    assert checkpoint.status == CheckpointStatus.READY and checkpoint.metrics["resumed_from_step"] >= 1
    assert checkpoint.hyperparameters["resolved"]["adapter"] == "full"
