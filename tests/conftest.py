"""Shared test fixtures.

Tests run on whatever DATABASE_URL points at: SQLite by default, PostgreSQL in
CI (.ci/run). Tests that only make sense on PostgreSQL (row locks, SKIP
LOCKED, parallel connections) use the ``postgres`` marker and say so when
skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from hypothesis import settings as hypothesis_settings

# Property tests that touch the database take as long as the machine lets
# them: a shared 2-core machine under the suite's two workers made one example
# take 314 ms against Hypothesis's 200 ms deadline, failing a test whose
# property held. Speed is measured by benchmarks/, not by tests.
hypothesis_settings.register_profile("suite", deadline=None)
hypothesis_settings.load_profile("suite")

# CI (.ci/run) sets this: there a skipped PostgreSQL test would hide a failure.
REQUIRE_FULL_STACK = os.environ.get("REQUIRE_FULL_STACK") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REQUIRE_FULL_STACK and connection.vendor != "postgresql":
        raise pytest.UsageError("REQUIRE_FULL_STACK=1 but DATABASE_URL does not point at PostgreSQL")
    skip_pg = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://... (.ci/run does)")
    for item in items:
        if "postgres" in item.keywords and connection.vendor != "postgresql":
            item.add_marker(skip_pg)


@pytest.fixture(autouse=True)
def plain_static_storage(settings: Any) -> None:
    """Pages render {% static %}; without DEBUG the settings pick the manifest
    storage, which needs collectstatic. Tests serve from the finders instead."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def test_database_url() -> str:
    """A DATABASE_URL that points a child process at the test database."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings.get("USER") or ""
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{settings.get('HOST') or '127.0.0.1'}:{settings.get('PORT') or 5432}/{settings['NAME']}"


class WorkerProcess:
    def __init__(self, process: subprocess.Popen[str], queue: str, log: Path) -> None:
        self.process = process
        self.queue = queue
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def celery_worker_process(transactional_db: None, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A real ``celery worker`` process on the configured broker and the test database.

    It consumes a queue of its own, so messages left over from other runs
    (the filesystem broker keeps them on disk) never reach it.
    """
    queue = f"test-{uuid.uuid4().hex[:12]}"
    log = tmp_path / "worker.log"
    env = os.environ | {"DATABASE_URL": test_database_url(), "SECRET_KEY": settings.SECRET_KEY}
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "annotate", "worker", "-Q", queue, "--pool=solo",
             "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
            stdout=sink, stderr=subprocess.STDOUT, env=env, text=True, cwd=settings.BASE_DIR,
        )  # fmt: skip
    worker = WorkerProcess(process, queue, log)
    deadline = time.monotonic() + 60
    while "ready." not in worker.output():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"celery worker did not start:\n{worker.output()}")
        time.sleep(0.2)
    try:
        yield worker
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
