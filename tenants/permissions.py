"""Scopes: a view names the scope it needs (``required_scope``), or the scopes any one of which will
do for a request (``scopes_for(request)``: reads and writes of one resource); the caller's API key must
carry it."""

from __future__ import annotations

from typing import cast

from rest_framework import permissions, status
from rest_framework.request import Request
from rest_framework.views import APIView

from core.errors import DomainError
from tenants.requests import TenantRequest


class InsufficientScope(DomainError):
    """403: the key is valid, it just may not do this."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "insufficient_scope"


class HasScope(permissions.BasePermission):
    """Use after ``HasTenant``: the key must carry ``view.required_scope`` or one of ``view.scopes_for(request)``;
    ``details.required_scope`` names the first of those."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        api_key = cast(TenantRequest, request).auth  # HasTenant ran first
        if hasattr(view, "scopes_for"):
            scopes: list[str] = view.scopes_for(request)
        else:
            assert hasattr(view, "required_scope"), f"{type(view).__name__} names no required_scope"
            scopes = [view.required_scope]
        if not any(api_key.has_scope(scope) for scope in scopes):
            names = " or ".join(f"'{scope}'" for scope in scopes)
            raise InsufficientScope(f"This API key lacks the {names} scope.", details={"required_scope": scopes[0]})
        return True
