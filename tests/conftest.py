"""Shared test fixtures.

Tests run on whatever DATABASE_URL points at: SQLite by default, PostgreSQL in
CI (.ci/run). Tests that only make sense on PostgreSQL (row locks, SKIP
LOCKED, parallel connections) use the ``postgres`` marker and say so when
skipped.
"""

from __future__ import annotations

import pytest
from django.db import connection


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_pg = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://... (.ci/run does)")
    for item in items:
        if "postgres" in item.keywords and connection.vendor != "postgresql":
            item.add_marker(skip_pg)
