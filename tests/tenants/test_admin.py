"""The tenants console through the admin's own views."""

from __future__ import annotations

import json

import pytest

from tenants.models import FREE_TIER, ApiKey, RateTier
from tenants.services import create_api_key, hash_api_key

pytestmark = pytest.mark.django_db

ADMIN = "/admin/tenants"


def test_tiers_are_editable_in_the_admin_for_endpoints_that_exist(admin_client):
    free = RateTier.objects.get(name=FREE_TIER)
    assert admin_client.get(f"{ADMIN}/ratetier/").status_code == 200
    response = admin_client.post(
        f"{ADMIN}/ratetier/{free.pk}/change/",
        {"name": FREE_TIER, "requests_per_window": 120, "endpoint_limits": '{"hybrid": 60}'},
    )
    assert response.status_code == 302, response.content
    free.refresh_from_db()
    assert (free.requests_per_window, free.endpoint_limits) == (120, {"hybrid": 60})
    for limits in ('{"hybrid": -1}', '{"rerank": 20}'):
        rejected = admin_client.post(
            f"{ADMIN}/ratetier/{free.pk}/change/",
            {"name": FREE_TIER, "requests_per_window": 120, "endpoint_limits": limits},
        )
        assert rejected.status_code == 200
        names = "vector, bm25, hybrid, graph, stats, knowledge, ingest"
        message = f"must map endpoint names ({names}) to positive integers"
        assert message in rejected.content.decode()
    free.refresh_from_db()
    assert free.endpoint_limits == {"hybrid": 60}


def tenant_form(tenant, **inline) -> dict:
    return {
        "name": tenant.name, "is_active": "on", "expand_synonyms": "on", "rate_tier": tenant.rate_tier_id,
        "api_keys-TOTAL_FORMS": "0", "api_keys-INITIAL_FORMS": "0", **inline,
    }  # fmt: skip


def test_keys_are_not_added_on_the_tenant_page(admin_client, tenant):
    """Only create_api_key makes a usable key (and shows its secret once); the inline cannot add one."""
    page = admin_client.get(f"{ADMIN}/tenant/{tenant.pk}/change/")
    assert page.status_code == 200
    (keys_inline,) = page.context["inline_admin_formsets"]
    assert not keys_inline.has_add_permission and keys_inline.formset.max_num == 0
    response = admin_client.post(
        f"{ADMIN}/tenant/{tenant.pk}/change/",
        tenant_form(
            tenant, **{"api_keys-TOTAL_FORMS": "1", "api_keys-0-name": "typed in", "api_keys-0-scopes": "search"}
        ),
    )
    assert response.status_code == 302, response.content
    assert not ApiKey.objects.filter(tenant=tenant).exists()


def test_a_tenant_opts_out_of_the_search_analytics_on_its_page(admin_client, tenant):
    assert tenant.record_searches is True  # recorded unless it opts out
    assert 'name="record_searches"' in admin_client.get(f"{ADMIN}/tenant/{tenant.pk}/change/").content.decode()
    assert admin_client.post(f"{ADMIN}/tenant/{tenant.pk}/change/", tenant_form(tenant)).status_code == 302
    tenant.refresh_from_db()
    assert tenant.record_searches is False
    admin_client.post(f"{ADMIN}/tenant/{tenant.pk}/change/", tenant_form(tenant, record_searches="on"))
    tenant.refresh_from_db()
    assert tenant.record_searches is True


def test_a_key_added_in_the_admin_is_issued_by_the_service_and_its_secret_shown_once(admin_client, tenant):
    page = admin_client.get(f"{ADMIN}/apikey/add/")
    assert list(page.context["adminform"].form.fields) == [
        "tenant", "name", "scopes", "expires_at", "principals", "knowledge_base_ids"
    ]  # fmt: skip
    response = admin_client.post(
        f"{ADMIN}/apikey/add/",
        {"tenant": tenant.pk, "name": "ci", "scopes": ["search", "ingest"], "expires_at_0": "2099-01-01",
         "expires_at_1": "00:00:00"},
        follow=True,
    )  # fmt: skip
    assert response.status_code == 200
    key = ApiKey.objects.get(tenant=tenant)
    assert (key.name, key.scopes, key.expires_at.year) == ("ci", ["search", "ingest"], 2099)
    (shown,) = [m.message for m in response.context["messages"] if "shown this once" in m.message]
    raw_key = shown.rsplit(" ", 1)[-1]
    assert hash_api_key(raw_key) == key.key_hash
    search = admin_client.post(
        "/api/v1/retrieval/bm25", data=json.dumps({"query": "hello"}), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw_key}",
    )  # fmt: skip
    assert search.status_code == 200, search.content
    assert raw_key not in admin_client.get(f"{ADMIN}/apikey/{key.pk}/change/").content.decode()


def test_an_unknown_scope_is_a_form_error(admin_client, tenant):
    response = admin_client.post(f"{ADMIN}/apikey/add/", {"tenant": tenant.pk, "scopes": ["root"]})
    assert response.status_code == 200
    assert "scopes" in response.context["adminform"].form.errors
    assert not ApiKey.objects.exists()


def test_the_revoke_action_revokes_through_the_service(admin_client, tenant):
    keys = [create_api_key(tenant=tenant, name=name) for name in ("a", "b", "kept")]
    response = admin_client.post(
        f"{ADMIN}/apikey/",
        {"action": "revoke", "_selected_action": [keys[0].api_key.pk, keys[1].api_key.pk]},
        follow=True,
    )
    assert response.status_code == 200
    revoked = dict(ApiKey.objects.values_list("name", "revoked_at"))
    assert revoked["a"] and revoked["b"] and revoked["kept"] is None
    assert "Revoked 2 API key(s)." in response.content.decode()
    search = admin_client.post(
        "/api/v1/retrieval/bm25", data=json.dumps({"query": "hello"}), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {keys[0].raw_key}",
    )  # fmt: skip
    assert search.status_code == 403 and search.json()["error"]["code"] == "invalid_api_key"


def test_the_key_list_shows_when_each_key_was_last_used(admin_client, tenant):
    raw_key = create_api_key(tenant=tenant, name="ci").raw_key
    assert ApiKey.objects.get(tenant=tenant).last_used_at is None
    response = admin_client.post(
        "/api/v1/retrieval/bm25",
        data=json.dumps({"query": "hello"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw_key}",
    )
    assert response.status_code == 200, response.content
    used = ApiKey.objects.get(tenant=tenant).last_used_at
    assert used is not None
    listing = admin_client.get(f"{ADMIN}/apikey/")
    assert "Last used at" in listing.content.decode()
    assert listing.context["cl"].result_list[0].last_used_at == used
