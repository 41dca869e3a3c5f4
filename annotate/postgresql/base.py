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

It also hands out cursors that prepare their statements on the server
(``prepared_cursor``), for the hot path's fixed statements: PostgreSQL then
parses and plans each once per connection instead of on every key press,
which more than halves a key press's PostgreSQL CPU. Django's own cursors
keep binding on the client and prepare nothing, so no ORM query, and none of
the hand-out's searches whose best plan depends on the values, can fall to a
generic plan. Behind a
connection pooler that cannot carry prepared statements (PgBouncer before
1.21 in transaction mode), ``DATABASE_PREPARED_STATEMENTS=false`` turns them
off (docs/operations.md).

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
from typing import Any, cast

from django.conf import settings
from django.db.backends.postgresql import base
from django.db.backends.postgresql.base import Cursor as DjangoCursor  # type: ignore[attr-defined]  # psycopg 3 only
from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]  # psycopg 3 only
from django.db.backends.postgresql.operations import DatabaseOperations as DjangoOperations
from django.db.backends.postgresql.psycopg_any import register_tzloader  # type: ignore[import-untyped]
from django.db.backends.utils import CursorWrapper
from psycopg import errors, pq
from psycopg.postgres import types

# psycopg prepares a statement only when asked (prepare=True) or after this
# many runs of it; nothing here relies on the count, so it is out of reach.
_PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


class _PipelineCounts:
    _fetch_pipeline: Any  # psycopg's, of the cursor class this is mixed into

    # What fetchone() does first in pipeline mode: wait for this statement's
    # result (a no-op outside a pipeline or once it is here). The row count
    # and the columns are read before any fetch, by the ORM and by us.
    @property
    def rowcount(self) -> int:
        self._fetch_pipeline()
        return int(super().rowcount)  # type: ignore[misc]

    @property
    def description(self) -> Any:
        self._fetch_pipeline()
        return super().description  # type: ignore[misc]


class Cursor(_PipelineCounts, DjangoCursor):  # type: ignore[misc]  # its base is untyped
    pass


class PreparedCursor(_PipelineCounts, ServerBindingCursor):  # type: ignore[misc]  # its base is untyped
    """Binds on the server and prepares every statement it runs (once per connection and statement text)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        return super().execute(query, params, prepare=True)


class DatabaseOperations(DjangoOperations):
    def last_executed_query(self, cursor: Any, sql: str, params: Any) -> str:
        # A prepared statement's text holds $1, $2 ...: log it with its values, as Django's own cursors are logged.
        if isinstance(cursor, PreparedCursor):
            try:
                return str(self.compose_sql(sql, params))
            except errors.DataError:
                return sql  # values it cannot write out: the statement as sent
        return super().last_executed_query(cursor, sql, params)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def get_connection_params(self) -> dict[str, Any]:
        params: dict[str, Any] = super().get_connection_params()
        if params.get("cursor_factory") is DjangoCursor:  # not with OPTIONS server_side_binding
            params["cursor_factory"] = Cursor
        if params.get("prepare_threshold") is None and settings.DATABASE_PREPARED_STATEMENTS:
            params["prepare_threshold"] = _PREPARE_ONLY_WHEN_ASKED
        return params

    def prepared_cursor(self) -> CursorWrapper:
        """A cursor (wrapped as Django wraps its own) whose statements are prepared on the server.

        For statements whose best plan does not depend on their values
        (primary and unique keys): PostgreSQL may switch a prepared statement
        to a generic plan after five runs. With prepared statements off, a
        plain cursor.
        """
        self.close_if_health_check_failed()
        self.ensure_connection()
        if self.connection.prepare_threshold is None:
            return self.cursor()
        with self.wrap_database_errors:
            raw = PreparedCursor(self.connection)
            # As create_cursor does: the time zone of timestamptz results.
            loader = self.connection.adapters.get_loader(types["timestamptz"].oid, pq.Format.TEXT)
            if self.timezone != loader.timezone:
                register_tzloader(self.timezone, raw)
            return cast(CursorWrapper, self._prepare_cursor(raw))  # type: ignore[attr-defined]  # Django's, as cursor() uses it

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
