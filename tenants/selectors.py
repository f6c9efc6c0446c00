"""Reads for tenants and API keys."""

from __future__ import annotations

import hmac
import threading
from typing import Any

from cachetools import TTLCache
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import QuerySet

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
    """The usable key matching ``raw_key``: looked up by prefix, compared in constant time.

    Keys are remembered per process (by their hash) for ``API_KEY_CACHE_TTL_S``; a remembered key
    is re-checked with one small query for what gates access (revocation, expiry, scopes, bound principals,
    knowledge-base limits, the tenant's ``is_active``), so those changes apply at once everywhere, while a tenant's new rate
    tier or expansion switches reach other processes within that time."""
    key_hash = hash_api_key(raw_key)
    with _usable_keys_lock:
        api_key = _usable_keys.get(key_hash)
    if api_key is not None and _access_unchanged(api_key):
        return api_key if api_key.is_usable() else None
    api_key = _usable_key_from_db(raw_key, key_hash)
    with _usable_keys_lock:
        if api_key is None:
            _usable_keys.pop(key_hash, None)
        elif settings.API_KEY_CACHE_TTL_S > 0:
            _usable_keys[key_hash] = api_key
    return api_key


def forget_api_keys() -> None:
    """Drop this process's remembered keys (after a tenant or tier change here; tests)."""
    with _usable_keys_lock:
        _usable_keys.clear()


def _usable_key_from_db(raw_key: str, key_hash: str) -> ApiKey | None:
    prefix = split_api_key(raw_key)
    if prefix is None:
        return None
    api_key = ApiKey.objects.select_related("tenant__rate_tier").filter(prefix=prefix).first()
    if api_key is None or not hmac.compare_digest(api_key.key_hash, key_hash):
        return None
    if not api_key.is_usable() or not api_key.tenant.is_active:
        return None
    return api_key


def _access_unchanged(api_key: ApiKey) -> bool:
    """Whether the database still has what the remembered key decided access with."""
    with connection.cursor() as cursor:
        cursor.execute(_ACCESS_SQL, [api_key.pk])
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row == (
        api_key.revoked_at,
        api_key.expires_at,
        api_key.scopes,
        api_key.principals,
        api_key.knowledge_base_ids,
        api_key.tenant.is_active,
    )


_ACCESS_SQL = (
    f"SELECT k.revoked_at, k.expires_at, k.scopes, k.principals, k.knowledge_base_ids, t.is_active FROM {ApiKey._meta.db_table} k "
    f"JOIN {Tenant._meta.db_table} t ON t.id = k.tenant_id WHERE k.id = %s"
)
_usable_keys: TTLCache[str, ApiKey] = TTLCache(maxsize=10_000, ttl=max(settings.API_KEY_CACHE_TTL_S, 1))
_usable_keys_lock = threading.Lock()


def tenants_visible_to(user: User | AnonymousUser) -> QuerySet[Tenant]:
    """The tenants a console user may search and inspect: every tenant for a superuser or for staff
    granted the ``tenants.view_tenant`` model permission, none for other staff."""
    if user.is_active and user.is_staff and user.has_perm("tenants.view_tenant"):
        return Tenant.objects.order_by("name")
    return Tenant.objects.none()
