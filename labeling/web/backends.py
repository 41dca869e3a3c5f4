"""The sign-in backend: Django's ModelBackend, with the user's Labeler loaded in the same query as the user.

Every labeler request reads the signed-in user (the session check) and then
its Labeler; one LEFT JOIN makes that one query instead of two
(``labeling.labelers.labeler_for_user`` takes the joined row).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


class UserWithLabelerBackend(ModelBackend):
    def get_user(self, user_id: Any) -> User | None:
        user = User._default_manager.select_related("labeler").filter(pk=user_id).first()
        return user if user is not None and self.user_can_authenticate(user) else None

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None and username is not None:
            # Wrong credentials: stop here, so that ModelBackend (listed after
            # this one only to read sessions signed in before it) does not
            # hash the password a second time.
            raise PermissionDenied
        return user
