"""Errors of the tenants app a caller can act on; ``core.errors`` maps them to HTTP."""

from __future__ import annotations

from rest_framework import status

from core.errors import ConflictError, DomainError


class TenantExists(ConflictError):
    code = "tenant_exists"


class ActAsNotAllowed(DomainError):
    """403: a search body named ``principals`` but the key lacks the ``act_as`` scope (docs/permissions.md)."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "act_as_not_allowed"
