"""The health check of persistent PostgreSQL connections: no round trip while alive, a fresh connection once dead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's connection health check")


@pytest.fixture
def persistent() -> Iterator[Any]:
    """A second connection to the test database, outside the test's transaction, as a web request holds it."""
    wrapper: Any = connections.create_connection("default")
    wrapper.settings_dict["CONN_HEALTH_CHECKS"] = True
    wrapper.health_check_enabled = True
    wrapper.ensure_connection()
    wrapper.health_check_done = False  # a new request
    yield wrapper
    wrapper.close()


@pytest.mark.django_db
def test_a_live_connection_is_checked_without_a_query(persistent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def ping(self: BaseDatabaseWrapper) -> bool:
        raise AssertionError("the health check sent a query")

    monkeypatch.setattr(type(persistent), "is_usable", ping)
    raw = persistent.connection
    with persistent.cursor() as cursor:
        cursor.execute("SELECT 2")
        assert cursor.fetchone() == (2,)
    assert persistent.connection is raw  # kept, not reopened


@pytest.mark.django_db
def test_a_connection_the_server_closed_is_replaced_before_the_request_uses_it(
    persistent: Any,
) -> None:
    old_pid = persistent.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
    deadline = time.monotonic() + 10
    while persistent._idle_connection_alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # the server's goodbye arrives asynchronously
    with persistent.cursor() as cursor:
        # Without the check this query would fail: the old backend is gone.
        cursor.execute("SELECT pg_backend_pid()")
        (new_pid,) = cursor.fetchone()
    assert new_pid != old_pid


@pytest.mark.django_db
def test_a_prepared_statement_runs_again_on_the_connection_that_replaced_a_dead_one(persistent: Any) -> None:
    # Prepared statements live and die with their connection: the new one prepares them afresh.
    def prepared_pid() -> tuple[int, int]:
        with persistent.prepared_cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid(), %s::int + 1", [41])
            pid, answer = cursor.fetchone()
        with persistent.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            (count,) = cursor.fetchone()
        assert (answer, count) == (42, 1)
        return pid, count

    old_pid, _ = prepared_pid()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
    deadline = time.monotonic() + 10
    while persistent._idle_connection_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    persistent.health_check_done = False  # the next request
    new_pid, _ = prepared_pid()
    assert new_pid != old_pid
