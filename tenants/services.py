"""Writes for tenants and API keys."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from core.names import checked_name
from core.uniqueness import conflict_on, redrawn_on_collision
from tenants.errors import TenantExists
from tenants.models import ApiKey, Scope, Tenant, default_scopes
from tenants.principals import EVERYONE, InvalidPrincipals, clean_principals

KEY_PREFIX_BYTES = 6
KEY_SECRET_BYTES = 32
KEY_SCHEME = "rk"
# PostgreSQL's names for the UNIQUE of a ``unique=True`` column (``<table>_<column>_key``).
TENANT_NAME_UNIQUE = "tenants_tenant_name_key"
API_KEY_PREFIX_UNIQUE = "tenants_apikey_prefix_key"
# ``ApiKey.last_used_at`` is kept to this resolution, so authenticating does not write on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def stamp_vocabulary_change(tenant_id: int) -> None:
    """After a write of the tenant's synonyms or protected terms, in the same transaction: the next
    search of every process reads the new stamp and with it the new vocabulary. Random, not a counter:
    a counter bumped in a transaction that rolls back is bumped to the same value again by the next
    write, so a vocabulary read inside the first would be kept for the second."""
    Tenant.objects.filter(pk=tenant_id).update(vocabulary_stamp=secrets.randbits(63))


def hash_api_key(raw_key: str) -> str:
    """SHA-256 of the whole key: keys carry 256 random bits, so a slow KDF would add nothing."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


def split_api_key(raw_key: str) -> str | None:
    """Return the lookup prefix of a well-formed key, else None."""
    parts = raw_key.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_SCHEME or not parts[1] or not parts[2]:
        return None
    return parts[1]


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    raw_key: str  # shown once, never stored


def create_tenant(name: str) -> Tenant:
    name = checked_name(name)
    with conflict_on(TENANT_NAME_UNIQUE, TenantExists(f"a tenant named {name!r} already exists")):
        return Tenant.objects.create(name=name)


def get_or_create_tenant(name: str) -> Tenant:
    """The tenant named ``name``, created when missing (the demo and evaluation set-ups); of two
    processes creating it at once, the one that loses the insert reads the winner's row."""
    try:
        return Tenant.objects.filter(name=name).first() or create_tenant(name)
    except TenantExists:
        return Tenant.objects.get(name=name)


def validate_scopes(scopes: Iterable[str]) -> list[str]:
    """The distinct scopes in a stable order; ValueError names unknown ones or an empty list."""
    wanted = list(dict.fromkeys(scope.strip() for scope in scopes if scope.strip()))
    unknown = [scope for scope in wanted if scope not in Scope.values]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; use {', '.join(Scope.values)}")
    if not wanted:
        raise ValueError("a key needs at least one scope")
    return wanted


def create_api_key(
    *,
    tenant: Tenant,
    name: str = "",
    expires_at: datetime | None = None,
    scopes: Iterable[str] | None = None,
    principals: Iterable[str] = (),
    knowledge_base_ids: Iterable[int] = (),
) -> IssuedKey:
    """A new key; ``principals``: bound ones it always searches as; ``knowledge_base_ids``: the only KBs
    it reaches (none: all of its tenant's; docs/permissions.md). ``ValueError`` names a bad value."""
    name = checked_name(name, allow_blank=True)
    scope_list = default_scopes() if scopes is None else validate_scopes(scopes)
    try:
        bound = clean_principals(list(principals), where="principals")
    except InvalidPrincipals as error:
        raise ValueError(str(error)) from None
    if EVERYONE in bound:
        raise ValueError("principals: a key bound to '*' reads what a key bound to nothing reads; leave it out")
    kb_ids = sorted(set(knowledge_base_ids))
    if any(isinstance(kb_id, bool) or not isinstance(kb_id, int) or kb_id < 1 for kb_id in kb_ids):
        raise ValueError("knowledge base ids are positive integers")
    fields = {"scopes": scope_list, "principals": bound, "knowledge_base_ids": kb_ids}
    return redrawn_on_collision(API_KEY_PREFIX_UNIQUE, lambda: _insert_api_key(tenant, name, expires_at, fields))


def _insert_api_key(tenant: Tenant, name: str, expires_at: datetime | None, fields: dict[str, Any]) -> IssuedKey:
    prefix = secrets.token_hex(KEY_PREFIX_BYTES)
    raw_key = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(KEY_SECRET_BYTES)}"
    api_key = ApiKey.objects.create(
        tenant=tenant, name=name, prefix=prefix, key_hash=hash_api_key(raw_key), expires_at=expires_at, **fields
    )
    return IssuedKey(api_key=api_key, raw_key=raw_key)


def revoke_api_key(api_key: ApiKey) -> None:
    api_key.revoked_at = timezone.now()
    api_key.save(update_fields=["revoked_at"])


def record_api_key_use(api_key: ApiKey, now: datetime | None = None) -> None:
    """Note that ``api_key`` was just used, writing ``last_used_at`` at most once a minute per key.

    The value the process remembers with the key decides whether to write at all; the UPDATE's own
    condition lets only one of several processes that decided so at once write the row."""
    now = now or timezone.now()
    stale_before = now - LAST_USED_RESOLUTION
    if api_key.last_used_at is not None and api_key.last_used_at > stale_before:
        return
    ApiKey.objects.filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale_before), pk=api_key.pk).update(
        last_used_at=now
    )
    api_key.last_used_at = now
