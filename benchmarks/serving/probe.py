"""What one request costs, measured inside the server: a middleware of the benchmark's settings only.

Each response gets an ``X-Bench-Cost`` header that the load generator sums per
endpoint:

* ``q``: statements sent through Django (execute wrappers see every one);
* ``tx``: transactions, each two more round trips (psycopg sends BEGIN before
  the first statement and COMMIT or ROLLBACK at the end);
* ``ping``: connection health checks (``SELECT 1`` from CONN_HEALTH_CHECKS,
  sent around the execute wrappers);
* ``trips``: round trips to PostgreSQL: the times psycopg waits for an answer
  (or reads one that came while it was still sending). Without
  pipelining that is q + 2 tx + ping; a pipelined block
  (labeling.work.hotpath.pipelined) sends several statements per exchange;
* ``app_us``: CPU of the thread that ran the request, from this middleware in;
* ``pg_us``: CPU of the PostgreSQL backend serving this worker's connection
  during the request, from ``/proc/<pid>/schedstat`` (nanoseconds, not
  scheduler ticks). Single-threaded workers own their connection, so no other
  request shares that backend meanwhile.

The probe's own cost (two small file reads, and a generator around each of
psycopg's waits) is in ``app_us``; it is the same for the product and the floor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse

HEADER = "X-Bench-Cost"


class _Counts(threading.local):
    def __init__(self) -> None:
        self.tx = 0
        self.ping = 0
        self.trips = 0


_counts = _Counts()


def _patch() -> None:
    # Counted where psycopg sends them: a commit or rollback with a
    # transaction open, a health check's ping.
    from psycopg import pq

    def counting(name: str, *, transaction: bool) -> None:
        original = getattr(BaseDatabaseWrapper, name)

        def wrapper(self: BaseDatabaseWrapper, *args: Any) -> Any:
            raw = self.connection
            if not transaction:
                _counts.ping += 1
            elif raw is not None and raw.info.transaction_status != pq.TransactionStatus.IDLE:
                _counts.tx += 1
            return original(self, *args)

        setattr(BaseDatabaseWrapper, name, wrapper)

    counting("_commit", transaction=True)
    counting("_rollback", transaction=True)
    from django.db.backends.postgresql.base import DatabaseWrapper

    original_usable = DatabaseWrapper.is_usable

    def is_usable(self: DatabaseWrapper) -> bool:
        _counts.ping += 1
        return original_usable(self)

    DatabaseWrapper.is_usable = is_usable  # type: ignore[method-assign,assignment]

    # Round trips where psycopg waits for them (benchmarks.serving.roundtrips).
    from psycopg import waiting

    from benchmarks.serving.roundtrips import counting_wait

    def add(trips: int) -> None:
        _counts.trips += trips

    waiting.wait = counting_wait(waiting.wait, add)


_patch()


def _backend_cpu_ns() -> tuple[int, int] | None:
    raw = connection.connection
    if raw is None or raw.closed:
        return None
    pid = raw.info.backend_pid
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return pid, int(f.read().split()[0])
    except OSError:  # PostgreSQL on another host
        return None


class RequestCost:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        statements = 0

        def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            nonlocal statements
            statements += 1
            return execute(sql, params, many, context)

        _counts.tx = _counts.ping = _counts.trips = 0
        pg0 = _backend_cpu_ns()
        t0 = time.thread_time_ns()
        with connection.execute_wrapper(count):
            response = self.get_response(request)
        app = time.thread_time_ns() - t0
        pg1 = _backend_cpu_ns()
        # A connection opened during the request: all of its backend's CPU is this request's.
        start = pg0[1] if pg0 is not None and pg1 is not None and pg0[0] == pg1[0] else 0
        pg = 0 if pg1 is None else pg1[1] - start
        response[HEADER] = (
            f"q={statements};tx={_counts.tx};ping={_counts.ping};app_us={app // 1000};pg_us={pg // 1000};"
            f"trips={_counts.trips}"
        )
        return response
