"""Reads for tenants and API keys."""
from __future__ import annotations

import hmac

from tenants.models import ApiKey, Tenant
from tenants.services import hash_api_key, split_api_key


class TenantNotFound(Exception):
    pass


def tenant_by_name(name: str) -> Tenant:
    try:
        return Tenant.objects.get(name=name)
    except Tenant.DoesNotExist:
        raise TenantNotFound(f"no tenant named {name!r}") from None


def api_key_for(raw_key: str) -> ApiKey | None:
    """The usable key matching ``raw_key``: looked up by prefix, compared in constant time."""
    prefix = split_api_key(raw_key)
    if prefix is None:
        return None
    api_key = ApiKey.objects.select_related("tenant__rate_tier").filter(prefix=prefix).first()
    if api_key is None or not hmac.compare_digest(api_key.key_hash, hash_api_key(raw_key)):
        return None
    if not api_key.is_usable() or not api_key.tenant.is_active:
        return None
    return api_key
