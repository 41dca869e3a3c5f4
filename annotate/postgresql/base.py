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
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
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
