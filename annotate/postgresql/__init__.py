"""annotate's PostgreSQL engine (``base``), and the one way to ask any engine for a prepared cursor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

_T = TypeVar("_T")


def prepared_cursor(db: BaseDatabaseWrapper) -> CursorWrapper:
    """``db.prepared_cursor()`` on this engine (annotate.postgresql.base); a plain cursor on any other.

    SQLite has nothing to prepare across requests, so its statements run as before.
    """
    make = getattr(db, "prepared_cursor", None)
    return make() if make is not None else db.cursor()


def statement_sent(
    db: BaseDatabaseWrapper, statement: str, params: list[Any], read: Callable[[CursorWrapper], _T]
) -> Callable[[], _T]:
    """``statement`` executed now on a prepared cursor; the function returned reads its answer with ``read``, once.

    Inside a pipeline (labeling.work.hotpath.pipelined) the statement is sent,
    not waited for, so what is sent before the answer is read travels with
    it. The function closes the cursor.
    """
    cursor = prepared_cursor(db)
    try:
        cursor.execute(statement, params)
    except BaseException:
        cursor.close()
        raise

    def result() -> _T:
        try:
            return read(cursor)
        finally:
            cursor.close()

    return result


def fixed_literal(*values: str) -> str:
    """Constants of ours as SQL string literals, comma-separated, for a condition written into a statement.

    A partial index is matched only to a condition the planner can read: a
    value passed as a parameter is unknown to a prepared statement's generic
    plan, which then reads around the index. Only plain identifiers (the
    choices' values), never a value from a request.
    """
    for value in values:
        if not value.isidentifier():
            raise ValueError(f"not a fixed identifier: {value!r}")
    return ", ".join(f"'{value}'" for value in values)
