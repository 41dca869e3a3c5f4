"""Sign-in with throttled password guessing (docs/security.md, "Login throttling").

Failures are counted in the default cache, which every web process shares
(Redis in production, the database cache on the embedded default), so the
limits hold across gunicorn workers and hosts. An attempt is judged one of two ways:

* From a **trusted device** (a browser holding a valid device cookie for this
  account, issued when it last signed in to it; OWASP's "device cookies"): on
  that device's own counter only. ``LOGIN_FAILURES_PER_DEVICE`` failures in
  ``LOGIN_DEVICE_WINDOW_S`` lock that cookie until the window ends. Nothing an
  attacker does elsewhere can lock the owner's own browser out.
* From anywhere else, two counters:

  * per account and client address: ``LOGIN_FAILURES_PER_ADDRESS`` failures in
    ``LOGIN_ADDRESS_WINDOW_S`` lock that account *from that address* until the
    window ends. Other accounts signing in from the same address (an office
    behind one NAT) are never affected: there is no per-address-only lock.
  * per account across addresses: after ``LOGIN_FAILURES_PER_ACCOUNT`` failures
    in ``LOGIN_ACCOUNT_WINDOW_S`` the account is slowed, not locked: one attempt
    per ``LOGIN_ACCOUNT_SLOW_S`` is let through, so a botnet cannot guess faster
    than that.

Counters are keyed by the account as authentication sees it (``account_key``):
Django's form NFKC-normalises the username before the backend looks the user up,
so "victim" typed with a full-width "v" (U+FF56) signs in as victim and must share
victim's counters.

A refused attempt answers 429 and never checks the password, so a correct
password during a lock is refused too: the answer says nothing about it.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import unicodedata
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core import signing
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

THROTTLED_MESSAGE = "Too many failed sign-in attempts for this account. Please wait a few minutes and try again."
DEVICE_COOKIE = "login_device"
_DEVICE_SALT = "labeling.auth.device-cookie"
DEVICE_ACCOUNTS_MAX = 8


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


def account_key(username: str) -> str:
    """The throttling key of the account a typed username signs in to.

    ``AuthenticationForm``'s ``UsernameField`` strips and NFKC-normalises the input before
    ``ModelBackend`` looks it up, so every spelling that reaches one account must reach one
    key. Case is folded on top (a coarser key than authentication's, never a finer one),
    then NFKC again because case folding can leave a string that is not NFKC ("ﬃ", "ǰ").
    """
    folded = unicodedata.normalize("NFKC", username.strip()).casefold()
    return _digest(unicodedata.normalize("NFKC", folded))


@dataclass(frozen=True)
class _Counter:
    prefix: str
    limit: int
    window_s: int

    def key(self, subject: str, *, now: float) -> str:
        # A fixed window: the bucket number is part of the key, so a new window starts from zero.
        return f"login-throttle:{self.prefix}:{subject}:{int(now // self.window_s)}"

    def exhausted(self, subject: str, *, now: float) -> bool:
        return int(cache.get(self.key(subject, now=now), 0)) >= self.limit

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


def _per_device() -> _Counter:
    return _Counter("dev", settings.LOGIN_FAILURES_PER_DEVICE, settings.LOGIN_DEVICE_WINDOW_S)


def _device_payload(value: str | None) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        payload = signing.loads(value, salt=_DEVICE_SALT, max_age=settings.LOGIN_DEVICE_COOKIE_AGE_S)
    except signing.BadSignature:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("d"), str) or not isinstance(payload.get("a"), list):
        return None
    return payload


def device_cookie_issue(*, username: str, previous: str | None = None) -> str:
    """A signed device cookie marking this browser as one that signed in to ``username``.

    One browser may be shared (a lab machine): the cookie keeps the browser's id and the
    last ``DEVICE_ACCOUNTS_MAX`` accounts signed in from it, so each of them stays trusted.
    """
    payload = _device_payload(previous) or {"d": secrets.token_hex(16), "a": []}
    account = account_key(username)
    others = [a for a in payload["a"] if a != account]
    accounts = [*others[max(0, len(others) - DEVICE_ACCOUNTS_MAX + 1) :], account]
    return signing.dumps({"d": payload["d"], "a": accounts}, salt=_DEVICE_SALT, compress=True)


def device_cookie_read(value: str | None, *, username: str) -> str | None:
    """The throttling subject of this browser for this account, when its cookie is valid and was
    issued by a sign-in to this account; None for a missing, forged, expired or other account's
    cookie (those attempts are judged as untrusted)."""
    payload = _device_payload(value)
    account = account_key(username)
    if payload is None or account not in payload["a"]:
        return None
    return _digest(payload["d"], account)


def login_attempt_allowed(*, username: str, address: str, device: str | None = None, now: float | None = None) -> bool:
    """Whether this attempt may check a password; consumes the account's slow-mode slot if it is slowed."""
    now = time.time() if now is None else now
    if device is not None:
        # A trusted device answers only for itself: the account's and the address's counters,
        # which an attacker can fill from anywhere, do not apply to it.
        return not _per_device().exhausted(device, now=now)
    account = account_key(username)
    if _per_address().exhausted(_digest(account, address), now=now):
        return False
    if _per_account().exhausted(account, now=now):
        # Slowed: the first caller in each slot gets one try (add() succeeds once per timeout).
        return bool(cache.add(f"login-throttle:slow:{account}", 1, timeout=settings.LOGIN_ACCOUNT_SLOW_S))
    return True


def login_failure_record(*, username: str, address: str, device: str | None = None, now: float | None = None) -> None:
    now = time.time() if now is None else now
    if device is not None:
        _per_device().add_failure(device, now=now)
        return
    account = account_key(username)
    _per_address().add_failure(_digest(account, address), now=now)
    _per_account().add_failure(account, now=now)


def login_success_record(*, username: str, address: str, device: str | None = None, now: float | None = None) -> None:
    # The owner got in from here: their own typos from this address (or device) are forgiven.
    # The per-account counter stays, so a guesser elsewhere is not reset by the owner's success.
    now = time.time() if now is None else now
    if device is not None:
        _per_device().clear(device, now=now)
    _per_address().clear(_digest(account_key(username), address), now=now)


class ThrottledAuthenticationForm(AuthenticationForm):
    """The stock form, refusing before authentication while the account (or device) is throttled."""

    throttled = False

    def clean(self) -> dict[str, Any]:
        # The field-cleaned username: exactly what the backend will look up (stripped, NFKC).
        # When it did not validate, the stock clean() checks no password, so there is nothing to throttle.
        username = self.cleaned_data.get("username") or ""
        if not username:
            return super().clean()
        request = self.request
        address = client_address(request) if request is not None else ""
        cookie = request.COOKIES.get(DEVICE_COOKIE) if request is not None else None
        device = device_cookie_read(cookie, username=username)
        if not login_attempt_allowed(username=username, address=address, device=device):
            self.throttled = True
            raise ValidationError(THROTTLED_MESSAGE, code="throttled")
        try:
            cleaned = super().clean()
        except ValidationError:
            login_failure_record(username=username, address=address, device=device)
            raise
        login_success_record(username=username, address=address, device=device)
        return cleaned


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class ThrottledLoginView(LoginView):
    form_class = ThrottledAuthenticationForm
    redirect_authenticated_user = False

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        # This browser has now signed in to the account: from here on it is judged on its own counter.
        response.set_cookie(
            DEVICE_COOKIE,
            device_cookie_issue(
                username=form.cleaned_data["username"], previous=self.request.COOKIES.get(DEVICE_COOKIE)
            ),
            max_age=settings.LOGIN_DEVICE_COOKIE_AGE_S,
            secure=settings.SESSION_COOKIE_SECURE,
            httponly=True,
            samesite="Lax",
        )
        return response

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "throttled", False):
            response.status_code = 429
            response["Retry-After"] = str(settings.LOGIN_ACCOUNT_SLOW_S)
        return response
