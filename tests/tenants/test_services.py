from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.models import ApiKey, Tenant
from tenants.selectors import api_key_for
from tenants.services import (
    LAST_USED_RESOLUTION,
    create_api_key,
    get_or_create_tenant,
    hash_api_key,
    record_api_key_use,
    revoke_api_key,
)


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
