"""API-key scopes: what a key may do, set when it is issued (service, command, admin)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from tenants.models import ApiKey
from tenants.services import create_api_key, validate_scopes
from tests.conftest import client_with_key
from tests.factories import TenantFactory

SEARCH_PATHS = ["vector", "bm25", "hybrid", "search"]


def search_with(raw_key: str, path: str = "vector", body: str = '{"query": "hello"}'):
    return client_with_key(raw_key).post(f"/api/v1/retrieval/{path}", data=body, content_type="application/json")


@pytest.mark.django_db
def test_keys_get_the_search_scope_by_default(tenant):
    issued = create_api_key(tenant=tenant)
    assert issued.api_key.scopes == ["search"]
    assert search_with(issued.raw_key).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("path", SEARCH_PATHS)
def test_a_key_without_the_search_scope_gets_403_insufficient_scope(tenant, path):
    raw_key = create_api_key(tenant=tenant, scopes=["ingest", "admin"]).raw_key
    response = search_with(raw_key, path)
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "insufficient_scope"
    assert error["message"] == "This API key lacks the 'search' scope."
    assert error["details"] == {"required_scope": "search"}
    assert error["request_id"] == response["X-Request-ID"]


@pytest.mark.django_db
def test_the_scope_is_checked_before_the_body_is_read(tenant):
    raw_key = create_api_key(tenant=tenant, scopes=["ingest"]).raw_key
    assert search_with(raw_key, body="{not json").json()["error"]["code"] == "insufficient_scope"


@pytest.mark.django_db
def test_a_key_with_several_scopes_may_search(tenant):
    raw_key = create_api_key(tenant=tenant, scopes=["search", "ingest"]).raw_key
    assert search_with(raw_key, "hybrid").status_code == 200


@pytest.mark.django_db
def test_a_scope_removed_later_takes_effect_on_the_next_request(tenant):
    issued = create_api_key(tenant=tenant)
    assert search_with(issued.raw_key).status_code == 200
    ApiKey.objects.filter(pk=issued.api_key.pk).update(scopes=["ingest"])
    assert search_with(issued.raw_key).status_code == 403


def test_validate_scopes():
    assert validate_scopes(["ingest", " search", "ingest", ""]) == ["ingest", "search"]
    with pytest.raises(ValueError, match="unknown scope.*write; use search, ingest, admin"):
        validate_scopes(["search", "write"])
    with pytest.raises(ValueError, match="at least one scope"):
        validate_scopes(["", " "])


# --- create_api_key --scopes -----------------------------------------------------------------------


@pytest.fixture
def acme(db):
    return TenantFactory(name="acme")


def issue(**options) -> tuple[ApiKey, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_key", tenant="acme", stdout=out, stderr=err, **options)
    prefix = out.getvalue().strip().split("_")[1]
    return ApiKey.objects.get(prefix=prefix), err.getvalue()


@pytest.mark.django_db
def test_the_command_issues_search_keys_by_default(acme):
    api_key, message = issue()
    assert api_key.scopes == ["search"]
    assert "(scopes: search)" in message


@pytest.mark.django_db
def test_the_command_takes_comma_separated_scopes(acme):
    api_key, message = issue(scopes="search,ingest")
    assert api_key.scopes == ["search", "ingest"]
    assert "(scopes: search, ingest)" in message


@pytest.mark.django_db
@pytest.mark.parametrize(("scopes", "needle"), [("search,write", "unknown scope"), (",", "at least one scope")])
def test_the_command_rejects_unknown_or_no_scopes(acme, scopes, needle):
    with pytest.raises(CommandError, match=f"--scopes: .*{needle}"):
        issue(scopes=scopes)
    assert not ApiKey.objects.exists()


# --- admin -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_scopes_are_checkboxes_in_the_admin(admin_client, tenant):
    api_key = create_api_key(tenant=tenant).api_key
    url = f"/admin/tenants/apikey/{api_key.pk}/change/"
    page = admin_client.get(url).content.decode()
    assert 'type="checkbox" name="scopes" value="ingest"' in page
    form = {"tenant": tenant.pk, "name": "ci", "scopes": ["search", "admin"], "expires_at_0": "", "expires_at_1": ""}
    form |= {"revoked_at_0": "", "revoked_at_1": ""}
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content
    api_key.refresh_from_db()
    assert api_key.scopes == ["search", "admin"]
    assert admin_client.post(url, {**form, "scopes": []}).status_code == 200  # at least one is required
    api_key.refresh_from_db()
    assert api_key.scopes == ["search", "admin"]


@pytest.mark.django_db
def test_the_tenant_admin_shows_tiers_and_key_scopes(admin_client, tenant):
    create_api_key(tenant=tenant, scopes=["ingest"])
    assert b"free" in admin_client.get("/admin/tenants/tenant/").content
    page = admin_client.get(f"/admin/tenants/tenant/{tenant.pk}/change/").content.decode()
    assert 'name="rate_tier"' in page
    assert re.search(r'<input type="checkbox" name="api_keys-0-scopes" value="ingest"[^>]* checked>', page)
