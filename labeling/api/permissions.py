# mypy: allow-subclassing-any, allow-untyped-decorators, allow-untyped-calls
# (djangorestframework ships no type information; see pyproject [tool.mypy] overrides)
"""Who may call what. Every view names its permission; the project default denies anonymous callers."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request


class IsStaff(BasePermission):
    """Research staff: imports, exports, generations, the problem and solution tables."""

    message = "Only staff may use this endpoint."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff)


class IsLabeler(BasePermission):
    """Any signed-in person works on their own assignments (objects are scoped in the view)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated)
