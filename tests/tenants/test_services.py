import secrets
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from tenants import services as tenant_services
from tenants.errors import TenantExists
from tenants.models import FREE_TIER, ApiKey, RateTier, Tenant
from tenants.selectors import api_key_for
from tenants.services import (
    LAST_USED_RESOLUTION,
    IssuedKey,
    create_api_key,
    create_tenant,
    get_or_create_tenant,
    hash_api_key,
    record_api_key_use,
    revoke_api_key,
)
from tests.concurrency import meet_before, race


@pytest.mark.django_db
def test_only_the_hash_of_a_key_is_stored(tenant):
    issued = create_api_key(tenant=tenant, name="ci")
    stored = ApiKey.objects.get(pk=issued.api_key.pk)
    assert issued.raw_key not in {stored.key_hash, stored.prefix, stored.name}
    assert stored.key_hash == hash_api_key(issued.raw_key)
    assert issued.raw_key.startswith(f"rk_{stored.prefix}_")


@pytest.mark.django_db
def test_a_key_resolves_to_its_tenant_until_revoked(tenant):
    issued = create_api_key(tenant=tenant)
    assert api_key_for(issued.raw_key).tenant == tenant
    revoke_api_key(issued.api_key)
    assert api_key_for(issued.raw_key) is None


@pytest.mark.django_db
def test_expired_and_tampered_keys_resolve_to_nothing(tenant):
    expired = create_api_key(tenant=tenant, expires_at=timezone.now() - timedelta(seconds=1))
    assert api_key_for(expired.raw_key) is None
    valid = create_api_key(tenant=tenant)
    assert api_key_for(valid.raw_key[:-1] + ("A" if valid.raw_key[-1] != "A" else "B")) is None
    assert api_key_for("not-a-key") is None


def stored_last_use(api_key: ApiKey):
    return ApiKey.objects.values_list("last_used_at", flat=True).get(pk=api_key.pk)


@pytest.mark.django_db
def test_last_use_is_written_at_most_once_a_minute(tenant, django_assert_num_queries):
    api_key = create_api_key(tenant=tenant).api_key
    first = timezone.now()
    record_api_key_use(api_key, now=first)
    assert stored_last_use(api_key) == first
    with django_assert_num_queries(0):  # within the minute: decided from the remembered value alone
        record_api_key_use(api_key, now=first + LAST_USED_RESOLUTION - timedelta(seconds=1))
    assert stored_last_use(api_key) == first
    later = first + LAST_USED_RESOLUTION
    record_api_key_use(api_key, now=later)
    assert stored_last_use(api_key) == later == api_key.last_used_at


@pytest.mark.django_db
def test_of_processes_that_remember_an_old_last_use_only_one_writes(tenant):
    issued = create_api_key(tenant=tenant)
    start = timezone.now()
    record_api_key_use(issued.api_key, now=start)
    # Two processes remembered the key before that write, then use it a minute later.
    one, other = ApiKey.objects.get(pk=issued.api_key.pk), ApiKey.objects.get(pk=issued.api_key.pk)
    one.last_used_at = other.last_used_at = start - timedelta(hours=1)
    record_api_key_use(one, now=start + LAST_USED_RESOLUTION)
    record_api_key_use(other, now=start + LAST_USED_RESOLUTION + timedelta(seconds=5))
    assert stored_last_use(issued.api_key) == start + LAST_USED_RESOLUTION


@pytest.mark.django_db
def test_get_or_create_tenant_returns_the_existing_one_or_a_new_one(tenant):
    assert get_or_create_tenant(tenant.name) == tenant
    created = get_or_create_tenant("newcomer")
    assert created.pk != tenant.pk and Tenant.objects.get(name="newcomer") == created


# --- uniqueness under concurrent creates (tests.concurrency.race: threads on the real database) ------


@pytest.mark.django_db(transaction=True)
def test_of_two_concurrent_creates_of_one_tenant_name_one_wins_and_one_conflicts():
    outcomes = race(lambda: create_tenant("twin"), lambda: create_tenant("twin"))
    [created] = [outcome for outcome in outcomes if isinstance(outcome, Tenant)]
    [conflict] = [outcome for outcome in outcomes if not isinstance(outcome, Tenant)]
    assert isinstance(conflict, TenantExists), conflict
    assert (conflict.status_code, conflict.code) == (409, "tenant_exists")
    assert list(Tenant.objects.filter(name="twin")) == [created]


@pytest.mark.django_db(transaction=True)
def test_concurrent_get_or_create_tenant_both_get_the_one_row(monkeypatch):
    meet_before(monkeypatch, tenant_services, "create_tenant")  # both saw no tenant of that name
    outcomes = race(lambda: get_or_create_tenant("twin"), lambda: get_or_create_tenant("twin"))
    assert all(isinstance(outcome, Tenant) for outcome in outcomes), outcomes
    assert [outcome.pk for outcome in outcomes] == [Tenant.objects.get(name="twin").pk] * 2


@pytest.mark.django_db(transaction=True)
def test_two_tenants_created_while_the_free_tier_is_missing_share_one_recreated_tier(monkeypatch):
    elsewhere = RateTier.objects.create(name="elsewhere", requests_per_window=1)
    Tenant.objects.update(rate_tier=elsewhere)
    RateTier.objects.filter(name=FREE_TIER).delete()
    meet_before(monkeypatch, RateTier.objects, "create")  # both found no free tier
    outcomes = race(lambda: create_tenant("one"), lambda: create_tenant("other"))
    assert all(isinstance(outcome, Tenant) for outcome in outcomes), outcomes
    [free] = RateTier.objects.filter(name=FREE_TIER)
    assert [outcome.rate_tier_id for outcome in outcomes] == [free.pk, free.pk]


@pytest.mark.django_db(transaction=True)
def test_two_keys_drawing_one_prefix_at_once_both_get_issued_with_distinct_prefixes(monkeypatch, tenant):
    draws, token_hex, lock = [], secrets.token_hex, threading.Lock()

    def same_first_prefix(nbytes):
        with lock:
            draws.append(nbytes)
            return "0" * (2 * nbytes) if len(draws) <= 2 else token_hex(nbytes)

    monkeypatch.setattr(secrets, "token_hex", same_first_prefix)
    outcomes = race(lambda: create_api_key(tenant=tenant), lambda: create_api_key(tenant=tenant))
    assert all(isinstance(outcome, IssuedKey) for outcome in outcomes), outcomes
    prefixes = sorted(outcome.api_key.prefix for outcome in outcomes)
    assert prefixes[0] == "000000000000" and prefixes[1] != prefixes[0] and len(draws) == 3
    assert all(api_key_for(outcome.raw_key).tenant == tenant for outcome in outcomes)
