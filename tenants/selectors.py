"""Reads for tenants and API keys."""
from __future__ import annotations

import hmac
import threading
from time import monotonic

from cachetools import TTLCache
from django.conf import settings
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

    A verified key is remembered per process (by its hash) for ``API_KEY_CACHE_TTL_S`` and used
    without a query: a cached search then touches no database. So a change to what gates access
    (revocation, expiry date, scopes, the tenant's ``is_active``, its tier) applies at once in the
    process that saves it (``tenants.signals``) and within ``API_KEY_CACHE_TTL_S`` everywhere else;
    an expiry time passing applies at once (checked on every call)."""
    key_hash = hash_api_key(raw_key)
    with _usable_keys_lock:
        remembered = _usable_keys.get(key_hash)
    if remembered is not None and monotonic() - remembered[0] < settings.API_KEY_CACHE_TTL_S:
        api_key = remembered[1]
        return api_key if api_key.is_usable() else None
    api_key = _usable_key_from_db(raw_key, key_hash)
    with _usable_keys_lock:
        if api_key is None:
            _usable_keys.pop(key_hash, None)
        elif settings.API_KEY_CACHE_TTL_S > 0:
            _usable_keys[key_hash] = (monotonic(), api_key)
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


# (verified at, key) by key hash; the age is checked on read against the setting, the cache's own
# TTL only bounds memory.
_usable_keys: TTLCache = TTLCache(maxsize=10_000, ttl=max(settings.API_KEY_CACHE_TTL_S, 1))
_usable_keys_lock = threading.Lock()


def tenants_visible_to(user) -> QuerySet[Tenant]:
    """The tenants a console user may search and inspect: every tenant for a superuser or for staff
    granted the ``tenants.view_tenant`` model permission, none for other staff."""
    if user.is_active and user.is_staff and user.has_perm("tenants.view_tenant"):
        return Tenant.objects.order_by("name")
    return Tenant.objects.none()
