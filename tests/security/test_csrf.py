"""CSRF is enforced on every unsafe request a browser can send: each POST route of the matrix, login included.

The API checks CSRF for session-authenticated callers (a browser tab) and not for token callers (scripts).
"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.security.conftest import World, snapshot
from tests.security.test_access_matrix import MATRIX, NON_ADMIN, RATE_BODY, Route, _body, _concrete, _values

pytestmark = pytest.mark.django_db

POSTS = [r for r in NON_ADMIN if MATRIX[r.key].method == "post"]


@pytest.mark.parametrize("route", POSTS, ids=lambda r: r.pattern)
def test_it_refuses_a_post_without_a_csrf_token(world: World, route: Route) -> None:
    rule = MATRIX[route.key]
    user = world.staff if rule.access == "staff" else world.a.user
    client = APIClient(enforce_csrf_checks=True) if rule.api else Client(enforce_csrf_checks=True)
    client.force_login(user)
    before = snapshot()
    url = _concrete(route.pattern, _values(world, rule))
    response = client.post(url, _body(route), format="json") if rule.api else client.post(url, _body(route))
    assert response.status_code == 403, (url, response.status_code)
    assert snapshot() == before


def test_it_refuses_a_login_without_a_csrf_token(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/login/", {"username": "alice", "password": "pw-for-tests-1"})
    assert response.status_code == 403
    assert "_auth_user_id" not in client.session


def test_it_accepts_a_login_with_the_token_from_the_form(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get("/login/")
    token = client.cookies["csrftoken"].value
    response = client.post("/login/", {"username": "alice", "password": "pw-for-tests-1", "csrfmiddlewaretoken": token})
    assert response.status_code == 302


def test_it_refuses_an_admin_post_without_a_csrf_token(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.staff)
    before = snapshot()
    response = client.post(f"/admin/auth/user/{world.a.user.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert snapshot() == before


def test_it_lets_token_callers_post_to_the_api_without_csrf(world: World) -> None:
    token = Token.objects.create(user=world.a.user)
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    response = client.post(f"/api/assignments/{world.a_assignment.pk}/ratings/", RATE_BODY, format="json")
    assert response.status_code == 200


def test_it_lets_session_callers_post_to_the_api_with_the_csrf_header(world: World) -> None:
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.a.user)
    client.get("/login/")  # sets the CSRF cookie, as any page does
    token = client.cookies["csrftoken"].value
    url = f"/api/assignments/{world.a_assignment.pk}/ratings/"
    response = client.post(url, RATE_BODY, format="json", headers={"X-CSRFToken": token})
    assert response.status_code == 200
