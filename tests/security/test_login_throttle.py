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

from labeling.web.auth import THROTTLED_MESSAGE, login_attempt_allowed, login_failure_record
from tests.conftest import test_database_url as child_database_url
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
        "from labeling.web.auth import login_failure_record\n"
        "for _ in range(settings.LOGIN_FAILURES_PER_ADDRESS):\n"
        f"    login_failure_record(username='alice', address='{ATTACKER}')\n"
    )
    env = os.environ | {
        "DATABASE_URL": child_database_url(),
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


# --- Usernames as authentication sees them --------------------------------------------------------

# Spellings that Django's AuthenticationForm (NFKC) resolves to the account "victim".
VICTIM_SPELLINGS = [
    "\uff56ictim",  # full-width v
    "v\uff49ctim",  # full-width i
    "\uff56\uff49\uff43\uff54\uff49\uff4d",  # all full-width
    "VICTIM",
    " victim ",
    "v\u2170ctim",  # small roman numeral one (NFKC: "i")
]


@pytest.mark.parametrize("spelling", VICTIM_SPELLINGS)
def test_it_refuses_a_look_alike_spelling_of_a_locked_account(spelling: str) -> None:
    make_labeler(name="victim")
    _fail("victim", settings.LOGIN_FAILURES_PER_ADDRESS)
    # The look-alike reaches the same account (that is why it must be refused), so the right
    # password under it is refused like under the plain name, and so is a wrong one.
    assert _login(spelling, PASSWORD).status_code == 429
    assert _login(spelling, "wrong").status_code == 429


def test_it_shows_that_a_full_width_spelling_signs_in_to_the_same_account() -> None:
    # The premise of the test above: Django authenticates the look-alike as victim.
    make_labeler(name="victim")
    assert _signed_in(_login("\uff56ictim", PASSWORD))


def test_it_counts_failures_under_every_spelling_against_one_account() -> None:
    make_labeler(name="victim")
    spellings = ["\uff56ictim", "v\uff49ctim", "VICTIM", "victim", "\uff36ICTIM"]
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        assert _login(spellings[i % len(spellings)], "wrong").status_code == 200
    assert _login("victim", PASSWORD).status_code == 429


def test_it_slows_the_account_whatever_spelling_the_guesses_used(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_ACCOUNT = 4
    make_labeler(name="victim")
    for i, spelling in enumerate(["\uff56ictim", "v\uff49ctim", "Victim", "victim"]):
        _login(spelling, "wrong", address=f"192.0.2.{i}")
    assert _login("\uff56ictim", "wrong", address="192.0.2.50").status_code == 200  # the slot's one try
    assert _login("v\uff49ctim", PASSWORD, address="192.0.2.51").status_code == 429


# --- Device cookies: slow mode cannot keep the owner out ------------------------------------------


def _owner_browser(address: str = "198.51.100.20") -> Client:
    """A browser in which the owner has signed in before (so it holds a device cookie), now signed out."""
    browser = Client(REMOTE_ADDR=address)
    assert _signed_in(browser.post("/login/", {"username": "victim", "password": PASSWORD}))
    browser.post("/logout/")
    return browser


def _slow_down(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_ACCOUNT = 6
    for i in range(6):
        _login("victim", "wrong", address=f"192.0.2.{i}")


def test_it_lets_the_owner_in_from_their_own_browser_while_an_attacker_holds_every_slow_slot(settings: Any) -> None:
    make_labeler(name="victim")
    browser = _owner_browser()
    _slow_down(settings)
    for round_ in range(5):
        # The attacker spends the slot just before each owner attempt, from a fresh address...
        _login("victim", "wrong", address=f"203.0.113.{100 + round_}")
        browser.defaults["REMOTE_ADDR"] = f"198.51.100.{30 + round_}"  # ...and the owner moves too
        assert _signed_in(browser.post("/login/", {"username": "victim", "password": PASSWORD}))
        browser.post("/logout/")


def test_it_still_slows_a_browser_without_the_owners_cookie(settings: Any) -> None:
    make_labeler(name="victim")
    _owner_browser()
    _slow_down(settings)
    _login("victim", "wrong", address="203.0.113.100")  # takes the slot
    assert _login("victim", PASSWORD, address="198.51.100.99").status_code == 429


def test_it_judges_a_trusted_browser_on_its_own_counter(settings: Any) -> None:
    settings.LOGIN_FAILURES_PER_DEVICE = 3
    make_labeler(name="victim")
    browser = _owner_browser()
    for _ in range(3):
        assert browser.post("/login/", {"username": "victim", "password": "wrong"}).status_code == 200
    assert browser.post("/login/", {"username": "victim", "password": PASSWORD}).status_code == 429
    # Its failures were its own: an untrusted browser elsewhere is not slowed or locked by them.
    assert _signed_in(_login("victim", PASSWORD, address="198.51.100.77"))


def test_it_does_not_trust_a_cookie_issued_for_another_account(settings: Any) -> None:
    make_labeler(name="victim")
    make_labeler(name="mallory")
    attacker = Client(REMOTE_ADDR="203.0.113.5")
    assert _signed_in(attacker.post("/login/", {"username": "mallory", "password": PASSWORD}))
    attacker.post("/logout/")
    _slow_down(settings)
    _login("victim", "wrong", address="203.0.113.6")  # takes the slot
    # mallory's own device cookie buys nothing against victim's slow mode.
    assert attacker.post("/login/", {"username": "victim", "password": "guess"}).status_code == 429


def test_it_does_not_trust_a_forged_cookie(settings: Any) -> None:
    from labeling.web.auth import DEVICE_COOKIE

    make_labeler(name="victim")
    _slow_down(settings)
    _login("victim", "wrong", address="203.0.113.6")  # takes the slot
    forger = Client(REMOTE_ADDR="203.0.113.7")
    forger.cookies[DEVICE_COOKIE] = "eyJkIjoiMDAwMCIsImEiOltdfQ:forged:signature"
    assert forger.post("/login/", {"username": "victim", "password": PASSWORD}).status_code == 429


def test_it_keeps_each_account_signed_in_from_a_shared_browser_trusted(settings: Any) -> None:
    make_labeler(name="victim")
    make_labeler(name="colleague")
    shared = Client(REMOTE_ADDR="198.51.100.20")
    for name in ("victim", "colleague"):
        assert _signed_in(shared.post("/login/", {"username": name, "password": PASSWORD}))
        shared.post("/logout/")
    _slow_down(settings)
    _login("victim", "wrong", address="203.0.113.6")  # takes the slot
    assert _signed_in(shared.post("/login/", {"username": "victim", "password": PASSWORD}))


def test_it_leaves_no_unthrottled_password_check_in_the_url_map() -> None:
    # Every view that checks a password must be the throttled one: the admin's login and
    # DRF's token endpoint are the usual side doors.
    from django.contrib.auth.views import LoginView
    from django.urls import URLPattern, URLResolver, get_resolver
    from rest_framework.authtoken.views import ObtainAuthToken

    from labeling.web.auth import ThrottledLoginView

    def views(patterns: list[Any]) -> list[Any]:
        found: list[Any] = []
        for entry in patterns:
            if isinstance(entry, URLResolver):
                found += views(entry.url_patterns)
            elif isinstance(entry, URLPattern):
                found.append(getattr(entry.callback, "view_class", None) or entry.callback)
        return found

    checks_passwords = [
        v
        for v in views(get_resolver().url_patterns)
        if isinstance(v, type) and issubclass(v, LoginView | ObtainAuthToken)
    ]
    assert checks_passwords == [ThrottledLoginView]
    assert Client().get("/admin/login/")["Location"].startswith("/login/")
