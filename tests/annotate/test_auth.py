"""The sign-in backend (annotate.auth): the user loaded in one written-out statement, nothing else changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, authenticate
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.test import Client

from annotate.auth import ModelBackend
from tests.labeling.workflow_factories import make_labeler

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-1"


def test_it_loads_the_whole_user_in_one_query(django_assert_num_queries: Any) -> None:
    user = make_labeler(name="ann").user
    with django_assert_num_queries(1):
        loaded = ModelBackend().get_user(user.pk)
    assert loaded is not None
    for field in User._meta.concrete_fields:
        assert getattr(loaded, field.attname) == getattr(user, field.attname), field.name
    assert loaded.get_session_auth_hash() == user.get_session_auth_hash()
    assert not loaded._state.adding  # a stored row: save() updates it


def test_no_user_for_an_inactive_a_missing_or_a_malformed_id() -> None:
    user = make_labeler(name="ann").user
    user.is_active = False
    user.save()
    assert ModelBackend().get_user(user.pk) is None
    assert ModelBackend().get_user(10**9) is None
    assert ModelBackend().get_user("not a number") is None


def test_a_request_is_signed_in_through_it_and_a_password_change_signs_it_out() -> None:
    user = make_labeler(name="ann").user
    client = Client()
    assert client.post("/login/", {"username": "ann", "password": PASSWORD}).status_code == 302
    assert client.session[BACKEND_SESSION_KEY] == "annotate.auth.ModelBackend"
    assert client.get("/").status_code == 200
    assert client.get("/").wsgi_request.user.pk == user.pk
    user.set_password("another-password-2")
    user.save()
    assert client.get("/").wsgi_request.user.is_anonymous


def test_a_session_of_djangos_backend_stays_signed_in() -> None:
    user = make_labeler(name="ann").user
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    assert client.session[BACKEND_SESSION_KEY] == "django.contrib.auth.backends.ModelBackend"
    assert client.get("/").wsgi_request.user.pk == user.pk


def test_a_wrong_password_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    make_labeler(name="ann")
    calls: list[int] = []
    original = PBKDF2PasswordHasher.encode

    def counted(self: PBKDF2PasswordHasher, *args: Any, **kwargs: Any) -> str:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PBKDF2PasswordHasher, "encode", counted)
    assert authenticate(username="ann", password="wrong") is None
    assert len(calls) == 1
    calls.clear()
    assert authenticate(username="nobody", password="wrong") is None
    assert len(calls) == 1  # the timing guard of a missing user: once, not once per backend
    calls.clear()
    assert authenticate(username="ann", password=PASSWORD) is not None
    assert len(calls) == 1
