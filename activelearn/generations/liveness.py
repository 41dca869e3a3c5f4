"""A worker's pulse: heartbeats that say "this process is alive", apart from "it progresses".

A claimed pipeline step (training, a scoring chunk, grading, selecting) is handed to
another worker once its heartbeat is older than ``PIPELINE_HEARTBEAT_STALE_S``. Heartbeats
written only when the work reports progress force that staleness to outlast the longest
silent stretch of the work (loading a model, computing features, a long sympy call), which
made recovery from a killed worker take a quarter of an hour. So the two questions get two
clocks:

* **dead** (SIGKILL, OOM kill, lost host): the pulse thread dies with its process, the
  heartbeat stops at once, and the claim is stale ``PIPELINE_HEARTBEAT_STALE_S`` later
  (60 s by default).
* **hung** (a deadlock, a call that never returns): the process lives on, so the pulse stops
  beating only once the work has reported no progress (``Pulse.tick``) for
  ``PIPELINE_STALL_S`` (15 minutes by default); the claim goes stale after that.

The pulse beats from its own thread, hence its own database connection, which it closes
when it stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

# beat() refreshes the claim's heartbeat; False means the claim is gone (someone else holds
# it, or the work was cancelled), which the work learns from ``Pulse.lost``.
Beat = Callable[[], bool]


class Pulse:
    """Beats ``beat`` every ``every_s`` seconds in a daemon thread while the block runs.

    ``with Pulse(beat) as pulse: ... pulse.tick() ...``: call ``tick`` whenever the work moves
    on; without ticks for ``stall_s`` the pulse holds its beat, so a hung worker's claim goes
    stale as a dead one's would, only later.
    """

    def __init__(self, beat: Beat, *, every_s: float | None = None, stall_s: float | None = None) -> None:
        self._beat = beat
        self._every_s = float(settings.PIPELINE_HEARTBEAT_EVERY_S if every_s is None else every_s)
        self._stall_s = float(settings.PIPELINE_STALL_S if stall_s is None else stall_s)
        self._last_tick = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-pulse", daemon=True)
        self.lost = False

    def tick(self) -> None:
        self._last_tick = time.monotonic()

    def __enter__(self) -> Pulse:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._every_s):
                if time.monotonic() - self._last_tick > self._stall_s:
                    continue  # hung: let the claim go stale
                try:
                    if not self._beat():
                        self.lost = True
                        return
                except Exception:
                    # A database hiccup costs one beat, not the work: the next one may land.
                    logger.exception("heartbeat failed")
        finally:
            connection.close()
