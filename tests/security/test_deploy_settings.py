"""The production environment passes `check --deploy` and its responses carry the security headers."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from typing import Any

import pytest
from django.conf import settings

PRODUCTION = {
    "DATABASE_URL": "postgres://annotate:pw@db.invalid:5432/annotate",
    "SECRET_KEY": secrets.token_urlsafe(60),
    "ALLOWED_HOSTS": "example.org",
    "SECURE_SSL_REDIRECT": "true",
    "CACHE_URL": "redis://redis.invalid:6379/1",
    "CELERY_BROKER_URL": "redis://redis.invalid:6379/0",
    "DEBUG": "",
    "SECURE_COOKIES": "",
    "SECURE_HSTS_SECONDS": "",
}


def _inherited() -> dict[str, str]:
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for Playwright's sync API;
    # a production process never has it (check --deploy rightly refuses it).
    return {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env=_inherited() | env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=90,
    )


def _check(**overrides: str) -> subprocess.CompletedProcess[str]:
    return _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION | overrides)


def test_it_passes_check_deploy_with_the_production_environment() -> None:
    result = _check()
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SECURE_SSL_REDIRECT": "false"}, "security.W008"),
        ({"CACHE_URL": "locmem://"}, "annotate.E001"),
        ({"CACHE_URL": ""}, "annotate.W002"),
        ({"CELERY_BROKER_URL": "filesystem://"}, "annotate.W005"),
        ({"CONTENT_SECURITY_POLICY": "default-src *"}, "annotate.W004"),
        ({"SECURE_COOKIES": "false"}, "security.W012"),
    ],
)
def test_it_fails_check_deploy_on_each_mistake(overrides: dict[str, str], message: str) -> None:
    result = _check(**overrides)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


_HEADERS_SCRIPT = """
import json, django
django.setup()
from django.conf import settings
# collectstatic has not run here: pages take their static URLs from the finders.
settings.STORAGES = {**settings.STORAGES, "staticfiles": {
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
client = Client()
plain = client.get("/login/", headers={"host": "example.org"})
response = client.get("/login/", secure=True, headers={"host": "example.org"})
cookies = {name: {"secure": bool(c["secure"]), "httponly": bool(c["httponly"]), "samesite": c["samesite"]}
           for name, c in response.cookies.items()}
print(json.dumps({"plain": [plain.status_code, plain.get("Location")], "headers": dict(response.items()),
                  "cookies": cookies}))
"""


@pytest.fixture(scope="module")
def production_response() -> dict[str, Any]:
    # Login is anonymous and needs no database; the session cookie is set by a
    # signed-in request, so its flags are read from the settings below.
    result = _run(["-c", _HEADERS_SCRIPT], PRODUCTION | {"DJANGO_SETTINGS_MODULE": "annotate.settings"})
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_it_redirects_plain_http_to_https(production_response: dict[str, Any]) -> None:
    assert production_response["plain"] == [301, "https://example.org/login/"]


def test_it_sends_the_security_headers(production_response: dict[str, Any]) -> None:
    headers = production_response["headers"]
    assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "same-origin"
    assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]


def test_it_sets_a_secure_httponly_csrf_cookie(production_response: dict[str, Any]) -> None:
    csrf = production_response["cookies"]["csrftoken"]
    assert csrf == {"secure": True, "httponly": True, "samesite": "Lax"}


def test_it_marks_the_session_cookie_secure_and_httponly_in_production() -> None:
    script = "import django; django.setup(); from django.conf import settings as s; " + (
        "print(s.SESSION_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY, s.CSRF_COOKIE_SECURE, s.DEBUG)"
    )
    result = _run(["-c", script], PRODUCTION | {"DJANGO_SETTINGS_MODULE": "annotate.settings"})
    assert result.stdout.split() == ["True", "True", "True", "False"], result.stderr


@pytest.mark.django_db
def test_it_serves_pages_without_inline_scripts_under_the_policy() -> None:
    from django.test import Client

    response = Client().get("/login/")
    assert "script-src 'self'" in response["Content-Security-Policy"]
    body = response.content.decode()
    assert "<script>" not in body and " onclick=" not in body and "javascript:" not in body
