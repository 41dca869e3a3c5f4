"""Sign-in with throttled password guessing (docs/security.md, "Login throttling").

Failures are counted in the default cache, which every web process shares
(Redis in production, the database cache on the embedded default), so the
limits hold across gunicorn workers and hosts. Two counters per failure:

* per account and client address: ``LOGIN_FAILURES_PER_ADDRESS`` failures in
  ``LOGIN_ADDRESS_WINDOW_S`` lock that account *from that address* until the
  window ends. Other accounts signing in from the same address (an office
  behind one NAT) are never affected: there is no per-address-only lock.
* per account across addresses: after ``LOGIN_FAILURES_PER_ACCOUNT`` failures
  in ``LOGIN_ACCOUNT_WINDOW_S`` the account is slowed, not locked: one attempt
  per ``LOGIN_ACCOUNT_SLOW_S`` is let through, so a botnet cannot lock its
  owner out for good, and cannot guess faster than that either.

A refused attempt answers 429 and never checks the password, so a correct
password during a lock is refused too: the answer says nothing about it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

THROTTLED_MESSAGE = "Too many failed sign-in attempts for this account. Please wait a few minutes and try again."


def client_address(request: HttpRequest) -> str:
    """The caller's address: REMOTE_ADDR, or the entry our own TLS proxy appended to X-Forwarded-For."""
    if settings.SECURE_PROXY_SSL_HEADER is not None:
        # Only the last entry is trustworthy: earlier ones are whatever the client sent.
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return str(last)
    return str(request.META.get("REMOTE_ADDR", ""))


def _digest(*parts: str) -> str:
    # Hashed: usernames are user input (any length and characters) and cache keys must be short and safe.
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def _username_key(username: str) -> str:
    return username.strip().casefold()


@dataclass(frozen=True)
class _Counter:
    prefix: str
    limit: int
    window_s: int

    def key(self, subject: str, *, now: float) -> str:
        # A fixed window: the bucket number is part of the key, so a new window starts from zero.
        return f"login-throttle:{self.prefix}:{subject}:{int(now // self.window_s)}"

    def count(self, subject: str, *, now: float) -> int:
        return int(cache.get(self.key(subject, now=now), 0))

    def add_failure(self, subject: str, *, now: float) -> None:
        key = self.key(subject, now=now)
        # add() then incr(): atomic on Redis; the database cache's incr is read-then-write, so two
        # simultaneous failures may count once there (the limits are far below what that matters for).
        cache.add(key, 0, timeout=self.window_s)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=self.window_s)

    def clear(self, subject: str, *, now: float) -> None:
        cache.delete(self.key(subject, now=now))


def _per_address() -> _Counter:
    return _Counter("addr", settings.LOGIN_FAILURES_PER_ADDRESS, settings.LOGIN_ADDRESS_WINDOW_S)


def _per_account() -> _Counter:
    return _Counter("acct", settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_ACCOUNT_WINDOW_S)


def login_attempt_allowed(*, username: str, address: str, now: float | None = None) -> bool:
    """Whether this attempt may check a password; consumes the account's slow-mode slot if it is slowed."""
    now = time.time() if now is None else now
    account = _digest(_username_key(username))
    if _per_address().count(_digest(account, address), now=now) >= settings.LOGIN_FAILURES_PER_ADDRESS:
        return False
    if _per_account().count(account, now=now) >= settings.LOGIN_FAILURES_PER_ACCOUNT:
        # Slowed: the first caller in each slot gets one try (add() succeeds once per timeout).
        return bool(cache.add(f"login-throttle:slow:{account}", 1, timeout=settings.LOGIN_ACCOUNT_SLOW_S))
    return True


def login_failure_record(*, username: str, address: str, now: float | None = None) -> None:
    now = time.time() if now is None else now
    account = _digest(_username_key(username))
    _per_address().add_failure(_digest(account, address), now=now)
    _per_account().add_failure(account, now=now)


def login_success_record(*, username: str, address: str, now: float | None = None) -> None:
    # The owner got in from here: their own typos from this address are forgiven. The per-account
    # counter stays, so a guesser elsewhere is not reset by the owner's success.
    now = time.time() if now is None else now
    account = _digest(_username_key(username))
    _per_address().clear(_digest(account, address), now=now)


class ThrottledAuthenticationForm(AuthenticationForm):
    """The stock form, refusing before authentication while the account is throttled."""

    throttled = False

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))
        address = client_address(self.request) if self.request is not None else ""
        if username and not login_attempt_allowed(username=username, address=address):
            self.throttled = True
            raise ValidationError(THROTTLED_MESSAGE, code="throttled")
        try:
            cleaned = super().clean()
        except ValidationError:
            if username:
                login_failure_record(username=username, address=address)
            raise
        login_success_record(username=username, address=address)
        return cleaned


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class ThrottledLoginView(LoginView):
    form_class = ThrottledAuthenticationForm
    redirect_authenticated_user = False

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "throttled", False):
            response.status_code = 429
            response["Retry-After"] = str(settings.LOGIN_ACCOUNT_SLOW_S)
        return response
