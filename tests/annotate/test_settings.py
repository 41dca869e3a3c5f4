"""Settings come from the environment and fail loudly on values they cannot parse."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings


def load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY"}}
    code = "import annotate.settings as s; print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, s.DEBUG)"
    return subprocess.run(
        [sys.executable, "-c", code],
        env=clean | env,
        capture_output=True,
        text=True,
        cwd=settings.BASE_DIR,
        check=False,
    )


def test_it_runs_on_the_embedded_default_with_nothing_set() -> None:
    result = load_settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["django.db.backends.sqlite3", "filesystem://", "False"]


def test_the_prm_feature_cache_is_on_under_var_by_default_and_can_be_moved_or_switched_off(tmp_path) -> None:
    def cache_dir(**env: str) -> str:
        unset = {"PRM_FEATURE_CACHE_DIR", "ANNOTATE_VAR_DIR", "PYTEST_XDIST_WORKER"}
        clean = {k: v for k, v in os.environ.items() if k not in unset}
        code = "import annotate.settings as s; print(s.PRM_FEATURE_CACHE_DIR)"
        run = subprocess.run(
            [sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, cwd=settings.BASE_DIR
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert cache_dir(ANNOTATE_VAR_DIR=str(tmp_path)) == str(tmp_path / "feature-cache")
    assert cache_dir(ANNOTATE_VAR_DIR=str(tmp_path), PRM_FEATURE_CACHE_DIR=str(tmp_path / "shared")) == str(
        tmp_path / "shared"
    )
    assert cache_dir(PRM_FEATURE_CACHE_DIR="off") == "None"


def test_it_uses_postgresql_and_redis_when_told() -> None:
    result = load_settings(
        DATABASE_URL="postgres://u@db:5432/annotate", CELERY_BROKER_URL="redis://r:6379/0", SECRET_KEY="k" * 50
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["annotate.postgresql", "redis://r:6379/0", "False"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"LEASE_SECONDS": "ten"}, "LEASE_SECONDS='ten' is not an integer"),
        ({"LEASE_SECONDS": "5"}, "LEASE_SECONDS=5 must be at least 60"),
        ({"DATABASE_URL": "mysql://u@h/db", "SECRET_KEY": "k"}, "DATABASE_URL must be postgres:// or sqlite://"),
        ({"DATABASE_URL": "postgres://u@h/db"}, "SECRET_KEY must be set"),
    ],
)
def test_it_refuses_bad_values_by_name(env: dict[str, str], message: str) -> None:
    result = load_settings(**env)
    assert result.returncode != 0
    assert message in result.stderr
