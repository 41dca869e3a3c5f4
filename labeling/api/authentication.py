# mypy: allow-subclassing-any, allow-untyped-decorators, allow-untyped-calls
# (djangorestframework ships no type information; see pyproject [tool.mypy] overrides)
"""API tokens that stop working when their user's password changes, as sessions do.

Django signs a session out after a password change without being told of it: the
session holds ``get_session_auth_hash()`` (an HMAC of the password hash) from sign-in,
and every request's user load compares it with the user's current one
(``django.contrib.auth.get_user``). A token is checked the same way, at the same point:
its stamp holds the hash from when it was issued, and a token whose user's hash has
changed since is deleted and refused. So every way a password changes (the admin, the
password change view, ``changepassword``, ``set_password`` and ``save`` in any service)
revokes the user's tokens, and none of them has to remember to: a signal on the user's
save would be the app-internal signal the house style avoids, and Django's own auth
does not use one for this either.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils.crypto import constant_time_compare
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from labeling.models import ApiTokenStamp

REVOKED = (
    "This token was revoked: the user's password changed after it was issued. "
    "Create a new one in the admin under Tokens."
)


def token_stamp(*, token: Token) -> None:
    """Bind ``token`` to its user's current password (the admin calls this when it issues one)."""
    ApiTokenStamp.objects.update_or_create(token=token, defaults={"auth_hash": token.user.get_session_auth_hash()})


class PasswordBoundTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing (and deleting) a token issued under an older password."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        # One query: the token, its user and its stamp.
        token = Token.objects.select_related("user", "stamp").filter(key=key).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        user = token.user
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        current = user.get_session_auth_hash()
        stamp = getattr(token, "stamp", None)
        if stamp is None:
            # Made outside the admin (a shell, a script): bound at its first use.
            try:
                with transaction.atomic():
                    ApiTokenStamp.objects.create(token=token, auth_hash=current)
            except IntegrityError:
                stamp = ApiTokenStamp.objects.get(token=token)  # a concurrent first use stamped it
        if stamp is not None and not constant_time_compare(stamp.auth_hash, current):
            Token.objects.filter(key=token.key).delete()
            raise exceptions.AuthenticationFailed(REVOKED)
        return user, token
