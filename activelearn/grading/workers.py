"""Grading in killable worker processes.

Symbolic checks can hang inside sympy, and ``math_verify``'s own SIGALRM timeout only
works in a main thread, so ``grade_many`` runs each item in a spawned worker process
and kills the worker when an item overruns.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnProcess
from typing import Any

from activelearn.grading.comparison import (
    DEFAULT_TIMEOUT_S,
    ERROR_PREFIX,
    TIMEOUT,
    Grader,
    GradeResult,
    grade_in_process,
    reference_answer,
)
from activelearn.grading.normalization import normalize_answer
from mathtext.extraction import extract_final_answer

_WORKER_START_TIMEOUT_S = 120.0


def _worker_loop(connection: Connection, grader: Grader) -> None:
    # Warm up before announcing readiness so import time never eats into an item's budget.
    grader("x = \\frac{1}{2}", "0.5")
    from math_verify import parse

    parse("$1$", parsing_timeout=None)
    connection.send(("ready", None))
    while True:
        task = connection.recv()
        if task is None:
            return
        index, given, reference = task
        try:
            result = grader(given, reference)
        except Exception as error:
            result = GradeResult(False, f"{ERROR_PREFIX}{type(error).__name__}: {error}")
        connection.send((index, result))


@dataclass
class _Worker:
    process: SpawnProcess
    connection: Connection
    ready: bool = False
    task: int | None = None
    deadline: float = 0.0
    started: float = 0.0


class GradingPool:
    """Grading worker processes that live across batches, so a long run (thousands of
    solutions, graded and written chunk by chunk) starts its workers once.

    ``grade`` runs a batch of ``(given, reference)`` pairs and returns the results in
    input order. An item that runs past ``timeout_s`` gets its worker killed and is graded
    incorrect with reason "timeout"; the rest of the batch carries on in a fresh worker.
    ``grader`` must be a picklable top-level function (workers are spawned, not forked:
    forking a process that holds threads, e.g. torch's, can deadlock). Use it as a
    context manager, or call ``close``.
    """

    def __init__(
        self,
        *,
        processes: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        grader: Grader = grade_in_process,
    ) -> None:
        self.processes = max(1, processes or min(4, os.cpu_count() or 1))
        self.timeout_s = timeout_s
        self.grader = grader
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_loop, args=(child, self.grader), daemon=True)
        process.start()
        child.close()
        return _Worker(process=process, connection=parent, started=time.monotonic())

    @staticmethod
    def _retire(worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=5)
        worker.connection.close()

    def grade(self, pairs: Sequence[tuple[str, str]]) -> list[GradeResult]:
        if not pairs:
            return []
        while len(self._workers) < min(self.processes, len(pairs)):
            self._workers.append(self._start())
        workers = self._workers
        results: list[GradeResult | None] = [None] * len(pairs)
        pending: deque[int] = deque(range(len(pairs)))
        try:
            while pending or any(w.task is not None for w in workers):
                for worker in workers:
                    if worker.ready and worker.task is None and pending:
                        index = pending.popleft()
                        worker.connection.send((index, pairs[index][0], pairs[index][1]))
                        worker.task, worker.deadline = index, time.monotonic() + self.timeout_s
                now = time.monotonic()
                deadlines = [w.deadline if w.ready else w.started + _WORKER_START_TIMEOUT_S for w in workers]
                ready = wait([w.connection for w in workers], timeout=max(0.0, min(deadlines) - now))
                for position, worker in enumerate(workers):
                    replacement: _Worker | None = None
                    if worker.connection in ready:
                        try:
                            message: Any = worker.connection.recv()
                        except (EOFError, OSError):
                            if not worker.ready:
                                raise RuntimeError("grading worker died while starting") from None
                            _fail(results, worker.task, f"{ERROR_PREFIX}worker died")
                            replacement = self._start()
                        else:
                            if message[0] == "ready":
                                worker.ready = True
                            else:
                                results[message[0]] = message[1]
                                worker.task = None
                    elif worker.ready and worker.task is not None and time.monotonic() >= worker.deadline:
                        _fail(results, worker.task, TIMEOUT)
                        replacement = self._start()
                    elif not worker.ready and time.monotonic() >= worker.started + _WORKER_START_TIMEOUT_S:
                        raise RuntimeError("grading worker did not start")
                    if replacement is not None:
                        self._retire(worker)
                        workers[position] = replacement
        except BaseException:
            self.close()  # workers may hold half a batch; none is reused
            raise
        return [r if r is not None else GradeResult(False, f"{ERROR_PREFIX}not graded") for r in results]

    def close(self) -> None:
        for worker in self._workers:
            if worker.process.is_alive() and worker.ready and worker.task is None:
                with contextlib.suppress(OSError):
                    worker.connection.send(None)
                worker.process.join(timeout=2)
            self._retire(worker)
        self._workers = []


def grade_many(
    pairs: Sequence[tuple[str, str]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    processes: int | None = None,
    *,
    grader: Grader = grade_in_process,
) -> list[GradeResult]:
    """Grade ``(given, reference)`` pairs in parallel worker processes, in input order
    (one ``GradingPool`` batch; see there for timeouts)."""
    if not pairs:
        return []
    with GradingPool(
        processes=min(processes or min(4, os.cpu_count() or 1), len(pairs)), timeout_s=timeout_s, grader=grader
    ) as pool:
        return pool.grade(pairs)


def _fail(results: list[GradeResult | None], index: int | None, reason: str) -> None:
    if index is not None:
        results[index] = GradeResult(False, reason)


def grade_answer(given: str, reference: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when ``given`` matches ``reference``. Either may be a bare answer or a whole
    solution (its final answer is extracted). Symbolic checks run in a worker process."""
    answer = extract_final_answer(given)
    if answer is None:
        return False
    if normalize_answer(answer).lower() == normalize_answer(reference_answer(reference)).lower():
        return True
    return grade_many([(given, reference)], timeout_s=timeout_s, processes=1)[0].correct
