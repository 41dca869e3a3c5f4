"""Schemathesis over the whole OpenAPI schema, as a labeler, as staff and anonymously, in-process (WSGI).

No operation may answer 5xx; answers must match the schema; anonymous callers are refused.
Bounded: a few examples per operation, well under a minute in all.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token
from rest_framework.throttling import UserRateThrottle
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.security.conftest import World

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


STAFF_PATHS = ("/api/problems", "/api/solutions", "/api/generations", "/api/exports")


def _forbidden(ctx: Any, response: Any, case: Any) -> bool:
    assert response.status_code in (403, 404), (case.method, case.formatted_path, response.status_code)
    return True


def _fuzz(
    world: World, user: Any, *, checks: list[Any], staff_checks: list[Any] | None = None, examples: int = 12
) -> int:
    token = Token.objects.create(user=user) if user is not None else None
    headers = {"Authorization": f"Token {token.key}"} if token else {}
    staff_token = Token.objects.get_or_create(user=world.staff)[0]
    schema = schemathesis.openapi.from_wsgi(
        "/api/schema/?format=json", WSGIHandler(), headers={"Authorization": f"Token {staff_token.key}"}
    )
    calls = 0

    def runner(operation: Any, chosen: list[Any]) -> Any:
        @given(case=operation.as_strategy())
        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            nonlocal calls
            calls += 1
            case.call_and_validate(headers=headers, checks=chosen)

        return run

    for result in schema.get_all_operations():
        operation = result.ok()
        chosen = staff_checks if staff_checks and operation.path.startswith(STAFF_PATHS) else checks
        runner(operation, chosen)()
    return calls


@pytest.fixture(autouse=True)
def keep_the_test_connection() -> Any:
    """A bare WSGIHandler closes the connection after each request (the test client keeps it): the
    test's transaction, and the data in it, must survive every call."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def no_api_throttle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": None, "anon": None})


CONFORMANCE = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def test_it_answers_a_labeler_without_5xx_and_as_documented(world: World) -> None:
    # The staff endpoints do not document their 403 for labelers; it is checked as such instead.
    calls = _fuzz(world, world.a.user, checks=CONFORMANCE, staff_checks=[not_a_server_error, _forbidden])
    assert calls > 0


def test_it_answers_staff_without_5xx_and_as_documented(world: World) -> None:
    # Status-code conformance is left out here: an invalid pagination cursor answers DRF's
    # undocumented 404 (see docs/security.md, "What is left").
    checks = [not_a_server_error, content_type_conformance, response_schema_conformance]
    assert _fuzz(world, world.staff, checks=checks) > 0


def _refused(ctx: Any, response: Any, case: Any) -> bool:
    from django.urls import Resolver404, resolve

    try:
        resolve(case.formatted_path)
    except Resolver404:
        # No route at all (a negative id): nothing to authorise, a JSON 404.
        assert response.status_code == 404
        return True
    assert response.status_code in (401, 403), (case.method, case.formatted_path, response.status_code)
    return True


def test_it_refuses_anonymous_callers_everywhere(world: World) -> None:
    assert _fuzz(world, None, checks=[_refused], examples=4) > 0
