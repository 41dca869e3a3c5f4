"""One consistent view of the database for a long read (an export, a training set).

All reads inside ``read_snapshot()`` happen in one snapshot (REPEATABLE READ on
PostgreSQL, one read transaction on SQLite's WAL), so ratings written while it
runs are either wholly in it or wholly absent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection, transaction


@contextlib.contextmanager
def read_snapshot() -> Iterator[None]:
    """Every query inside sees the database as of the first one."""
    if connection.in_atomic_block:
        # Already inside a transaction (a caller's, or a test's): its
        # isolation level applies and can no longer be changed.
        yield
        return
    if connection.vendor == "postgresql":
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield
        return
    if connection.vendor == "sqlite":
        # Django's atomic() would BEGIN IMMEDIATE here (see settings) and hold
        # the write lock for the whole export; a DEFERRED transaction is a
        # plain WAL read snapshot that lets labelers keep writing.
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")
        return
    yield
