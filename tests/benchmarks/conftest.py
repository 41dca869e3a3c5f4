"""A PostgreSQL database of the benchmark tests' own, on the test server, dropped after the test."""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import test_database_url as database_url


@pytest.fixture
def scratch_database_url() -> Iterator[str]:
    server = urllib.parse.urlparse(database_url())
    name = f"bench_test_{uuid.uuid4().hex[:8]}"
    yield server._replace(path=f"/{name}").geturl()
    import psycopg

    with psycopg.connect(server._replace(path="/postgres").geturl(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
