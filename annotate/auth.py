"""The sign-in backend: Django's ModelBackend with a cheaper per-request user load.

Every request of a signed-in user loads its user (``get_user``), a rating
included. Through the ORM that load is mostly query building and compiling in
Python; the same statement written out once and the row turned into a User
with ``from_db`` costs a fraction of it. What is loaded
and checked is unchanged: every column of the row (the session's auth hash is
computed from the password hash), and an inactive user is no user.

Sessions made before this backend existed name Django's ModelBackend; it stays
listed second in AUTHENTICATION_BACKENDS so that they stay signed in. It never
checks a password: a failed sign-in here raises PermissionDenied, which ends
Django's loop over the backends, so a wrong password is hashed once, not twice.

A key press and a submit need no user load at all (``SessionUser``): once a
request of this process has loaded a session's user and verified the session
against their password hash, the statement that writes checks that the user
is still active and still has that hash (labeling.work.hotpath.PRESS_PLAIN,
and the submit's locking read with OWNER_VERIFIED).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.auth.middleware import get_user as request_user
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest
from django.utils.crypto import constant_time_compare
from django.utils.functional import SimpleLazyObject

from annotate.postgresql import prepared_cursor


@cache
def _user_load() -> tuple[str, list[str]]:
    fields = User._meta.concrete_fields
    columns = ", ".join(f'"{f.column}"' for f in fields)
    return f'SELECT {columns} FROM "{User._meta.db_table}" WHERE "id" = %s', [f.attname for f in fields]


def _converted(db: BaseDatabaseWrapper, row: tuple[Any, ...]) -> list[Any]:
    # The ORM's own converters, as its compiler applies them to a row: SQLite
    # hands datetimes back as naive text, which the ORM makes aware.
    values = list(row)
    for i, converters in _converters(db.alias):
        for convert, column in converters:
            values[i] = convert(values[i], column, db)
    return values


@cache
def _converters(alias: str) -> list[tuple[int, list[tuple[Any, Any]]]]:
    db = connections[alias]
    found = []
    for i, field in enumerate(User._meta.concrete_fields):
        column = field.get_col(User._meta.db_table)
        if converters := db.ops.get_db_converters(column) + column.get_db_converters(db):
            found.append((i, [(convert, column) for convert in converters]))
    return found


class ModelBackend(DjangoModelBackend):
    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        attempted = (username or kwargs.get(User.USERNAME_FIELD)) is not None and password is not None
        user = super().authenticate(request, username, password, **kwargs)
        if user is None and attempted:
            raise PermissionDenied  # wrong credentials: no other backend is asked (see the module docstring)
        return user

    def get_user(self, user_id: Any) -> User | None:
        try:
            pk = User._meta.pk.to_python(user_id)
        except Exception:  # a session holding a user id of another shape: nobody
            return None
        sql, names = _user_load()
        alias = router.db_for_read(User)
        # Prepared on PostgreSQL (annotate.postgresql): it runs on every request.
        with prepared_cursor(connections[alias]) as cursor:
            cursor.execute(sql, [pk])
            row = cursor.fetchone()
        if row is None:
            return None
        user = User.from_db(alias, names, _converted(connections[alias], row))
        return user if self.user_can_authenticate(user) else None


@dataclass(frozen=True)
class SessionUser:
    """The user a request's session names, as this process verified the session: their id and password hash.

    Not a loaded user: whoever writes on their behalf with it checks, in the
    statement that writes, that the user is still active and still has this
    password hash (labeling.work.hotpath.PRESS_PLAIN, OWNER_VERIFIED). That is what the
    per-request user load checks (``get_user`` and the session's hash), at the
    moment of the write instead of before it. A password change or a
    deactivation since then fails the check, and the caller goes the usual way
    (Django's user load, which then signs the session out).
    """

    id: int
    password_hash: str


# (user id as the session holds it, the session's auth hash) -> the password
# hash that auth hash was verified against, by a request of this process.
# Process memory only, where every request's user load put the same hash
# before; bounded by emptying it when full (the next requests verify again).
_VERIFIED: dict[tuple[str, str], str] = {}
VERIFIED_SESSIONS_MAX = 10_000


def session_user(request: HttpRequest) -> SessionUser | None:
    """The session's user, if a request of this process verified this session; None: load the user as usual."""
    session = request.session
    user_id, auth_hash = session.get(SESSION_KEY), session.get(HASH_SESSION_KEY)
    if user_id is None or not auth_hash or session.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:
        return None
    password_hash = _VERIFIED.get((str(user_id), auth_hash))
    if password_hash is None:
        return None
    return SessionUser(id=int(user_id), password_hash=password_hash)


def _verified_user(request: HttpRequest) -> AbstractBaseUser | AnonymousUser:
    # Django's lazy user load (which verifies the session against the
    # password hash, and signs it out when that fails), then remembered.
    user = request_user(request)
    auth_hash = request.session.get(HASH_SESSION_KEY)
    if not user.is_authenticated or not isinstance(auth_hash, str):
        return user
    key = (str(user.pk), auth_hash)
    if _VERIFIED.get(key) != user.password and constant_time_compare(auth_hash, user.get_session_auth_hash()):
        if len(_VERIFIED) >= VERIFIED_SESSIONS_MAX:
            _VERIFIED.clear()
        _VERIFIED[key] = user.password
    return user


class AuthenticationMiddleware(DjangoAuthenticationMiddleware):
    """Django's, and a session whose user it loaded and verified is remembered for ``session_user``."""

    def process_request(self, request: HttpRequest) -> None:
        super().process_request(request)
        request.user = SimpleLazyObject(lambda: _verified_user(request))  # type: ignore[assignment]
