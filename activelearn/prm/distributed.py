"""Training on every GPU a worker sees: one process per GPU, started by the caller.

``train`` is what a worker calls. With one process (one GPU, a CPU, a frozen backbone)
it is ``train_prm`` in this process. With several it writes the job (items and config)
into the run's output directory and starts ``torch.distributed.run`` on this module; each
process runs ``train_prm``, whose Accelerator shards a full fine-tune with FSDP. The caller
stays in charge while it runs:

* **progress**: the main training process appends each optimizer step (with its wall
  time) and each epoch report to ``EVENTS_FILE``; the caller replays them into its own callbacks, so heartbeats
  and progress bars work as in-process. A callback that raises (the row left TRAINING)
  stops the run.
* **failure**: a process that dies (killed, out of memory, an exception) makes the
  launcher stop the others and exit non-zero; ``train`` raises ``DistributedTrainingError``
  naming the process and how it ended, with the end of the log. Checkpoints written
  before stay valid, so running the same job again resumes from the newest one.
* **the caller dying**: the launcher and every training process get SIGTERM when their
  parent goes (Linux ``PR_SET_PDEATHSIG``), so a killed worker leaves no training behind to
  race its retry.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from activelearn.prm.data import OutcomeSolution, TrainingItem
from activelearn.prm.memory import processes_visible, world_size
from activelearn.prm.training import RESULT_FILE, EpochReport, ProgressCallback, TrainConfig, TrainResult, train_prm

logger = logging.getLogger(__name__)

JOB_FILE = "distributed-job.pickle"
EVENTS_FILE = "distributed-events.jsonl"
LOG_FILE = "distributed.log"
POLL_S = 0.5
# After SIGTERM, how long the launcher gets to stop its processes before SIGKILL.
STOP_GRACE_S = 30.0
LOG_TAIL_LINES = 30
PR_SET_PDEATHSIG = 1


class DistributedTrainingError(RuntimeError):
    """A process of a distributed training run failed; the run stopped."""


@dataclass(frozen=True)
class Job:
    items: Sequence[TrainingItem]
    validation: Sequence[TrainingItem] | None
    config: TrainConfig
    run_id: str | None
    selection_pool: Sequence[OutcomeSolution] = ()


def training_processes(config: TrainConfig) -> int:
    """Processes ``config`` trains with: ``config.processes``, else one per visible GPU
    (1 on a CPU run)."""
    if config.processes is not None:
        return config.processes
    return 1 if config.cpu else processes_visible()


def train(
    items: Sequence[TrainingItem],
    config: TrainConfig,
    *,
    validation: Sequence[TrainingItem] | None = None,
    progress: ProgressCallback | None = None,
    on_epoch: Callable[[EpochReport], None] | None = None,
    run_id: str | None = None,
    selection_pool: Sequence[OutcomeSolution] = (),
) -> TrainResult:
    """``train_prm``, in this process or across ``training_processes(config)`` processes."""
    processes = training_processes(config)
    if processes > 1 and world_size() == 1:
        # Decided here, before anything starts: a configuration that fits nowhere is
        # refused in the caller, and a frozen backbone (head only) has nothing to spread.
        _, plan = config.planned(processes=processes)
        if plan.trains_backbone:
            return _launch(Job(items, validation, config, run_id, selection_pool), processes, progress, on_epoch)
    return train_prm(
        items,
        config,
        validation=validation,
        progress=progress,
        on_epoch=on_epoch,
        run_id=run_id,
        selection_pool=selection_pool,
    )


def _launch(
    job: Job,
    processes: int,
    progress: ProgressCallback | None,
    on_epoch: Callable[[EpochReport], None] | None,
) -> TrainResult:
    output_dir = Path(job.config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    job_file, events, log = output_dir / JOB_FILE, output_dir / EVENTS_FILE, output_dir / LOG_FILE
    # Our own processes read it back, from a directory only this run writes.
    job_file.write_bytes(pickle.dumps(job))
    events.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        "--max-restarts=0",
        "-m",
        __name__,
        str(job_file),
    ]
    logger.info("training with %d processes: %s", processes, " ".join(command))
    with open(log, "ab") as log_handle:
        log_handle.write(f"\n$ {' '.join(command)}\n".encode())
        log_handle.flush()
        launcher = subprocess.Popen(
            command, stdout=log_handle, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
        )
    try:
        code = _follow(launcher, events, progress, on_epoch)
    except BaseException:
        _stop(launcher)
        raise
    if code != 0:
        raise DistributedTrainingError(_failure(code, processes, log))
    job_file.unlink(missing_ok=True)
    return TrainResult.from_json((output_dir / RESULT_FILE).read_text())


def _follow(
    launcher: subprocess.Popen[bytes],
    events: Path,
    progress: ProgressCallback | None,
    on_epoch: Callable[[EpochReport], None] | None,
) -> int:
    """Replay the main process's events into the callbacks until the launcher exits."""
    handle: IO[str] | None = None
    pending = ""
    try:
        while True:
            code = launcher.poll()
            if handle is None and events.exists():
                handle = open(events)  # noqa: SIM115 -- read for as long as the run goes
            if handle is not None:
                pending += handle.read()
                *lines, pending = pending.split("\n")
                for line in lines:
                    _replay(json.loads(line), progress, on_epoch)
            if code is not None:
                return code
            time.sleep(POLL_S)
    finally:
        if handle is not None:
            handle.close()


def _replay(
    event: dict[str, Any], progress: ProgressCallback | None, on_epoch: Callable[[EpochReport], None] | None
) -> None:
    if "epoch" in event:
        if on_epoch is not None:
            on_epoch(EpochReport(**event["epoch"]))
    elif progress is not None:
        progress(int(event["step"]), int(event["total"]), float(event["loss"]))


def _stop(launcher: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the launcher's process group (it stops its processes), then SIGKILL."""
    if launcher.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(launcher.pid, signal.SIGTERM)
    try:
        launcher.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


def _failure(code: int, processes: int, log: Path) -> str:
    """Which process failed and how, from the launcher's summary, and the log's end."""
    lines = log.read_text(errors="replace").splitlines()
    causes = []
    for rank, exit_code in re.findall(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", "\n".join(lines)):
        number = int(exit_code)
        how = f"killed by {signal.Signals(-number).name}" if number < 0 else f"exit code {number}"
        causes.append(f"training process {rank} {how}")
    first = causes[-1] if causes else f"the launcher exited with code {code}"
    tail = "\n".join(lines[-LOG_TAIL_LINES:])
    return f"distributed training over {processes} processes failed: {first} (log {log}):\n{tail}"


def _die_with_parent() -> None:
    """Get SIGTERM when the parent process dies (Linux; a no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """One training process of a distributed run (started by ``torch.distributed.run``)."""
    _die_with_parent()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank " + os.environ.get("RANK", "?") + " %(message)s")
    job_file = Path((argv if argv is not None else sys.argv[1:])[0])
    # Written by our own caller, into a directory only this run writes.
    job: Job = pickle.loads(job_file.read_bytes())
    main_process = int(os.environ.get("RANK", "0")) == 0
    events = open(job_file.with_name(EVENTS_FILE), "a") if main_process else None  # noqa: SIM115

    def emit(event: dict[str, Any]) -> None:
        if events is not None:
            events.write(json.dumps(event) + "\n")
            events.flush()

    try:
        train_prm(
            job.items,
            job.config,
            validation=job.validation,
            progress=lambda step, total, loss: emit({"step": step, "total": total, "loss": loss, "at": time.time()}),
            on_epoch=lambda report: emit({"epoch": asdict(report)}),
            run_id=job.run_id,
            selection_pool=job.selection_pool,
        )
    finally:
        if events is not None:
            events.close()
    import torch.distributed

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
