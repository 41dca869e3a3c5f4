"""The sign-in backend: Django's ModelBackend with a cheaper per-request user load.

Every request of a signed-in user loads its user (``get_user``), a rating
included. Through the ORM that load is mostly query building and compiling in
Python; the same statement written out once and the row turned into a User
with ``from_db`` costs a fraction of it (docs/benchmarks.md). What is loaded
and checked is unchanged: every column of the row (the session's auth hash is
computed from the password hash), and an inactive user is no user.

Sessions made before this backend existed name Django's ModelBackend; it stays
listed second in AUTHENTICATION_BACKENDS so that they stay signed in. It never
checks a password: a failed sign-in here raises PermissionDenied, which ends
Django's loop over the backends, so a wrong password is hashed once, not twice.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest

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
