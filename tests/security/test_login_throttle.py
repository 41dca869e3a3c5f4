"""Password guessing is throttled per account and address, across processes, without locking out bystanders."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from labeling.auth import THROTTLED_MESSAGE, login_attempt_allowed, login_failure_record
from tests.conftest import test_database_url
from tests.labeling.workflow_factories import make_labeler

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-1"
ATTACKER = "203.0.113.7"


def _login(username: str, password: str, *, address: str = ATTACKER) -> Any:
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})


def _signed_in(response: Any) -> bool:
    return bool(response.status_code == 302 and response["Location"] == "/")


def _fail(username: str, times: int, *, address: str = ATTACKER) -> None:
    for _ in range(times):
        assert _login(username, "wrong", address=address).status_code == 200


def test_it_refuses_the_eleventh_failure_from_one_address_with_429() -> None:
    make_labeler(name="alice")
    _fail("alice", settings.LOGIN_FAILURES_PER_ADDRESS)
    response = _login("alice", "wrong")
    assert response.status_code == 429
    assert THROTTLED_MESSAGE in response.content.decode()
    assert response["Retry-After"]


def test_it_refuses_even_the_right_password_while_throttled() -> None:
    make_labeler(name="alice")
    _fail("alice", settings.LOGIN_FAILURES_PER_ADDRESS)
    response = _login("alice", PASSWORD)
    assert response.status_code == 429  # no oracle: the answer does not depend on the password
    assert not _signed_in(response)


def test_it_lets_other_accounts_sign_in_from_the_attackers_address() -> None:
    make_labeler(name="alice")
    make_labeler(name="bob")
    _fail("alice", settings.LOGIN_FAILURES_PER_ADDRESS)
    assert _login("alice", "wrong").status_code == 429
    assert _signed_in(_login("bob", PASSWORD))


def test_it_lets_the_owner_sign_in_from_elsewhere_while_one_address_is_locked() -> None:
    make_labeler(name="alice")
    _fail("alice", settings.LOGIN_FAILURES_PER_ADDRESS)
    assert _signed_in(_login("alice", PASSWORD, address="198.51.100.9"))


def test_it_counts_usernames_case_insensitively() -> None:
    make_labeler(name="alice")
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        _login("ALICE" if i % 2 else " alice", "wrong")
    assert _login("alice", "wrong").status_code == 429


def test_it_slows_an_account_guessed_from_many_addresses_to_one_try_per_slot(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_ACCOUNT = 6
    make_labeler(name="alice")
    for i in range(6):
        _login("alice", "wrong", address=f"192.0.2.{i}")
    # Slowed, not locked: one attempt gets through per slot, whoever sends it; the rest are refused.
    assert _signed_in(_login("alice", PASSWORD, address="192.0.2.200"))
    assert _login("alice", PASSWORD, address="192.0.2.201").status_code == 429


def test_it_forgets_failures_when_the_window_ends() -> None:
    now = time.time()
    for _ in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        login_failure_record(username="alice", address=ATTACKER, now=now)
    assert not login_attempt_allowed(username="alice", address=ATTACKER, now=now)
    later = now + settings.LOGIN_ADDRESS_WINDOW_S + 1
    assert login_attempt_allowed(username="alice", address=ATTACKER, now=later)


def test_it_uses_the_proxys_address_only_behind_our_proxy(settings: Any) -> None:
    make_labeler(name="alice")
    # Without BEHIND_TLS_PROXY a forged X-Forwarded-For changes nothing: REMOTE_ADDR counts.
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        Client(REMOTE_ADDR=ATTACKER).post(
            "/login/", {"username": "alice", "password": "x"}, headers={"X-Forwarded-For": f"10.0.0.{i}"}
        )
    assert _login("alice", "wrong").status_code == 429


@pytest.mark.django_db(transaction=True)
def test_it_shares_the_counters_between_processes() -> None:
    make_labeler(name="alice")
    script = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from labeling.auth import login_failure_record\n"
        "for _ in range(settings.LOGIN_FAILURES_PER_ADDRESS):\n"
        f"    login_failure_record(username='alice', address='{ATTACKER}')\n"
    )
    env = os.environ | {
        "DATABASE_URL": test_database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "DJANGO_SETTINGS_MODULE": "annotate.settings",
    }
    subprocess.run([sys.executable, "-c", script], env=env, cwd=settings.BASE_DIR, check=True, timeout=60)
    # Another process counted the failures; this one refuses.
    assert _login("alice", PASSWORD).status_code == 429


def test_it_throttles_the_api_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "3/minute", "anon": "2/minute"})
    labeler = make_labeler(name="alice")
    client = APIClient()
    client.force_authenticate(labeler.user)
    codes = [client.post("/api/tasks/next/").status_code for _ in range(4)]
    assert codes[-1] == 429 and 429 not in codes[:3]
    other = make_labeler(name="bob")
    client.force_authenticate(other.user)
    assert client.post("/api/tasks/next/").status_code != 429  # per user, not global
