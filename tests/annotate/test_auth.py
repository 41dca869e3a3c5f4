"""The sign-in backend (annotate.auth): the user loaded in one written-out statement, nothing else changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, authenticate
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.test import Client, RequestFactory

from annotate import auth as auth_module
from annotate.auth import ModelBackend, SessionUser, session_user
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


# --- A session verified once per process (annotate.auth.SessionUser) ----------


def _signed_in(name: str = "ann") -> tuple[Client, User]:
    user = make_labeler(name=name).user
    assert user is not None
    client = Client()
    assert client.post("/login/", {"username": name, "password": PASSWORD}).status_code == 302
    return client, user


def _session_user_of(client: Client) -> SessionUser | None:
    request = RequestFactory().get("/")
    request.session = client.session
    return session_user(request)


def test_a_session_is_known_only_once_a_request_of_this_process_verified_it() -> None:
    client, user = _signed_in()
    forged = Client()
    forged.force_login(user)
    session = forged.session
    session[HASH_SESSION_KEY] = "0" * 64  # a hash no password of theirs gives
    session.save()
    assert _session_user_of(forged) is None
    assert forged.get("/").wsgi_request.user.is_anonymous  # Django signs it out ...
    assert _session_user_of(forged) is None  # ... and it is never remembered
    assert client.get("/").status_code == 200  # the user loaded and the session verified
    assert _session_user_of(client) == SessionUser(id=user.pk, password_hash=user.password)


def test_a_password_change_makes_the_known_session_unknown() -> None:
    client, user = _signed_in()
    client.get("/")
    old = _session_user_of(client)
    assert old is not None
    user.set_password("another-password-2")
    user.save()
    # Still remembered with the old hash: a statement that checks it against
    # the stored one (PRESS_PLAIN) finds it changed and writes nothing.
    assert _session_user_of(client) == old and old.password_hash != user.password
    assert client.get("/").wsgi_request.user.is_anonymous
    assert _session_user_of(client) is None  # signed out: no session user at all


def test_the_remembered_sessions_are_forgotten_when_there_are_too_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_module, "VERIFIED_SESSIONS_MAX", 1)
    ann, _ = _signed_in("ann")
    bob, _ = _signed_in("bob")
    ann.get("/")
    assert _session_user_of(ann) is not None
    bob.get("/")
    assert _session_user_of(ann) is None and _session_user_of(bob) is not None
    ann.get("/")  # verified again on its next ordinary request
    assert _session_user_of(ann) is not None
