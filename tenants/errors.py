"""Errors of the tenants app a caller can act on; ``core.errors`` maps them to HTTP."""

from __future__ import annotations

from core.errors import ConflictError


class TenantExists(ConflictError):
    code = "tenant_exists"
