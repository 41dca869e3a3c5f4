"""An API token stops working when its user's password changes, by whatever path it changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.api.authentication import REVOKED
from labeling.models import ApiTokenStamp
from tests.labeling.admin_factories import make_staff

pytestmark = pytest.mark.django_db
NEW = "a-new-password-for-tests-2"


def _get(token: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return int(client.get("/api/problems/").status_code)


def _issued(user: User) -> str:
    token = Token.objects.create(user=user)
    assert _get(token.key) == 200  # its first use binds it to the password of now
    return str(token.key)


def _by_admin(user: User) -> None:
    admin = Client()
    admin.force_login(make_staff(name="another-admin"))
    response = admin.post(f"/admin/auth/user/{user.pk}/password/", {"password1": NEW, "password2": NEW})
    assert response.status_code == 302, response.content


def _by_password_change_view(user: User) -> None:
    own = Client()
    own.force_login(user)
    response = own.post(
        "/admin/password_change/",
        {"old_password": "pw-for-tests-1", "new_password1": NEW, "new_password2": NEW},
    )
    assert response.status_code == 302, response.content


def _by_command(user: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getpass", lambda prompt="": NEW)  # the terminal: a true I/O edge
    call_command("changepassword", user.username, stdout=None)


def _by_a_service(user: User) -> None:
    user.set_password(NEW)
    user.save()


@pytest.mark.parametrize("change", ["admin", "view", "command", "service"])
def test_a_password_change_revokes_the_users_tokens(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    user = make_staff()
    key = _issued(user)
    paths: dict[str, Callable[[], None]] = {
        "admin": lambda: _by_admin(user),
        "view": lambda: _by_password_change_view(user),
        "command": lambda: _by_command(user, monkeypatch),
        "service": lambda: _by_a_service(user),
    }

    paths[change]()

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    response = client.get("/api/problems/")
    # 403, not 401: the first authentication class (the session) sends no WWW-Authenticate.
    assert response.status_code == 403
    assert response.json() == {"detail": REVOKED}
    assert not Token.objects.filter(key=key).exists()  # revoked, not only refused this once
    fresh = Token.objects.create(user=user)
    assert _get(fresh.key) == 200  # a token issued after the change works


def test_a_token_issued_in_the_admin_is_bound_before_its_first_use() -> None:
    user = make_staff()
    admin = Client()
    admin.force_login(make_staff(name="another-admin"))

    response = admin.post("/admin/authtoken/tokenproxy/add/", {"user": user.pk})

    assert response.status_code == 302, response.content
    token = Token.objects.get(user=user)
    assert ApiTokenStamp.objects.filter(token=token).exists()
    _by_a_service(user)  # the password changes before the token was ever used
    assert _get(token.key) == 403


def test_other_saves_of_the_user_leave_the_token_working() -> None:
    user = make_staff()
    key = _issued(user)
    user.first_name = "Ada"
    user.save()

    assert _get(key) == 200
