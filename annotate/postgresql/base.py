"""Django's PostgreSQL backend with a health check that costs no round trip.

CONN_HEALTH_CHECKS makes Django ping a persistent connection (``SELECT 1``)
before its first query in every request: on the labeler hot path that was a
round trip per request, ~0.3 ms of the app and its PostgreSQL backend. The
check here asks the socket instead. An idle connection has nothing to read;
when PostgreSQL closes it (a restart, ``pg_terminate_backend``, an idle
timeout), the server's goodbye or the end of the stream makes the socket
readable, and the connection is closed and opened afresh before the
request uses it, exactly where the ping would have found it dead. What neither
the ping nor this can see in advance (a connection that dies mid-request) fails
that request, and Django closes the connection after it.

Its cursors also tell the right row count inside psycopg's pipeline mode
(labeling.work.hotpath sends a rating's writes in one round trip that way).
A pipelined statement's result arrives only when the pipeline is synced, so
psycopg's ``rowcount`` says -1 and ``description`` None until then; the ORM
reads the count after every UPDATE and DELETE (``.update()`` and ``.delete()``
return it, ``save()`` decides by it whether the row existed), and a raw read
may name its columns before it fetches. The cursor here waits for the answer
first, so either inside a pipeline is what it would have been without one.
"""

from __future__ import annotations

import select
from typing import Any

from django.db.backends.postgresql import base
from django.db.backends.postgresql.base import Cursor as DjangoCursor  # type: ignore[attr-defined]  # psycopg 3 only
from psycopg import pq


class Cursor(DjangoCursor):  # type: ignore[misc]  # its base is untyped
    # What fetchone() does first in pipeline mode: wait for this statement's
    # result (a no-op outside a pipeline or once it is here). The row count
    # and the columns are read before any fetch, by the ORM and by us.
    @property
    def rowcount(self) -> int:
        self._fetch_pipeline()
        return int(super().rowcount)

    @property
    def description(self) -> Any:
        self._fetch_pipeline()
        return super().description


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        if params.get("cursor_factory") is DjangoCursor:  # not with OPTIONS server_side_binding
            params["cursor_factory"] = Cursor
        return params

    def close_if_health_check_failed(self) -> None:
        # Django's own attributes (set in connect() and per request), not in the stubs.
        enabled, done = getattr(self, "health_check_enabled", False), getattr(self, "health_check_done", False)
        if self.connection is None or not enabled or done:
            return
        if not self._idle_connection_alive():
            self.close()
        self.health_check_done = True

    def _idle_connection_alive(self) -> bool:
        raw = self.connection
        if raw is None or raw.closed or raw.broken:
            return False
        if raw.info.transaction_status != pq.TransactionStatus.IDLE:
            # Inside a transaction the ping's answer would be the same: use it.
            return bool(self.is_usable())
        poller = select.poll()
        poller.register(raw.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        # Readable while idle: PostgreSQL said goodbye (or sent a notice we
        # never asked for); either way the connection is not worth keeping.
        return not poller.poll(0)
