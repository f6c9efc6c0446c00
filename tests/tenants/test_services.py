from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.models import ApiKey
from tenants.selectors import api_key_for
from tenants.services import create_api_key, hash_api_key, revoke_api_key


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
