"""Errors of the tenants app a caller can act on; ``core.errors`` maps them to HTTP."""
from __future__ import annotations

from core.errors import ConflictError


class TenantExists(ConflictError):
    code = "tenant_exists"


class KeyPrefixTaken(ConflictError):
    """Every draw of a new key's random prefix hit an existing key's (about never: 48 random bits)."""

    code = "api_key_prefix_taken"
