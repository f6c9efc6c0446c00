"""Scopes: a view names the scope it needs (``required_scope``), or the scopes any one of which will
do for a request (``scopes_for(request)``: reads and writes of one resource); the caller's API key must
carry it."""

from __future__ import annotations

from rest_framework import permissions, status

from core.errors import DomainError


class InsufficientScope(DomainError):
    """403: the key is valid, it just may not do this."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "insufficient_scope"


class HasScope(permissions.BasePermission):
    """Use after ``HasTenant``: the key must carry ``view.required_scope`` or one of ``view.scopes_for(request)``;
    ``details.required_scope`` names the first of those."""

    def has_permission(self, request, view) -> bool:
        scopes = view.scopes_for(request) if hasattr(view, "scopes_for") else [view.required_scope]
        if not any(request.auth.has_scope(scope) for scope in scopes):
            names = " or ".join(f"'{scope}'" for scope in scopes)
            raise InsufficientScope(f"This API key lacks the {names} scope.", details={"required_scope": scopes[0]})
        return True
