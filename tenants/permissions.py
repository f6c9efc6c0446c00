"""Scopes: a view names the scope it needs (``required_scope``); the caller's API key must carry it."""
from __future__ import annotations

from rest_framework import permissions, status

from core.errors import DomainError


class InsufficientScope(DomainError):
    """403: the key is valid, it just may not do this."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "insufficient_scope"


class HasScope(permissions.BasePermission):
    """Use after ``HasTenant``: the key must carry ``view.required_scope``."""

    def has_permission(self, request, view) -> bool:
        scope = view.required_scope
        if not request.auth.has_scope(scope):
            raise InsufficientScope(f"This API key lacks the '{scope}' scope.", details={"required_scope": scope})
        return True
