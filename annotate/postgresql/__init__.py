"""annotate's PostgreSQL engine (``base``), and the one way to ask any engine for a prepared cursor."""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


def prepared_cursor(db: BaseDatabaseWrapper) -> CursorWrapper:
    """``db.prepared_cursor()`` on this engine (annotate.postgresql.base); a plain cursor on any other.

    SQLite has nothing to prepare across requests, so its statements run as before.
    """
    make = getattr(db, "prepared_cursor", None)
    return make() if make is not None else db.cursor()
