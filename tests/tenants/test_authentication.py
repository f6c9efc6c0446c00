"""API-key authentication through the real API: the key alone decides the tenant of a request."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.models import ApiKey, Tenant
from tenants.selectors import forget_api_keys
from tenants.services import create_api_key, revoke_api_key
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory, TenantFactory

URL = "/api/v1/retrieval/vector"
BODY = json.dumps({"query": "hello"})
INVALID_KEY = "The API key is invalid, expired or revoked."


def post(client=None, body: str = BODY, **headers):
    return (client or APIClient()).post(URL, data=body, content_type="application/json", **headers)


def bearer(raw_key: str, scheme: str = "Bearer") -> dict:
    return {"HTTP_AUTHORIZATION": f"{scheme} {raw_key}"}


def assert_ok_empty(response):
    """Authenticated as a tenant without knowledge bases: a 200 with nothing to return."""
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["results"] == [] and body["total"] == 0
    assert body["request_id"] == response["X-Request-ID"]


def assert_rejected(response, status: int = 403, code: str = "invalid_api_key", message: str = INVALID_KEY):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"] == message
    assert error["request_id"] == response["X-Request-ID"]


@pytest.fixture
def raw_key(tenant) -> str:
    return create_api_key(tenant=tenant).raw_key


# --- the two headers ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_bearer_key_authenticates(raw_key):
    assert_ok_empty(post(**bearer(raw_key)))


@pytest.mark.django_db
def test_x_api_key_header_authenticates(raw_key):
    assert_ok_empty(post(HTTP_X_API_KEY=raw_key))
    assert_ok_empty(post(HTTP_X_API_KEY=f"  {raw_key}  "))  # surrounding blanks are ignored


@pytest.mark.django_db
@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(raw_key, scheme):
    assert_ok_empty(post(**bearer(raw_key, scheme)))


@pytest.mark.django_db
def test_extra_blanks_around_the_key_are_ignored(raw_key):
    assert_ok_empty(post(HTTP_AUTHORIZATION=f"Bearer    {raw_key}   "))


@pytest.mark.django_db
def test_the_key_itself_is_case_sensitive(raw_key):
    prefix, secret = raw_key.rsplit("_", 1)
    swapped = f"{prefix}_{secret.swapcase()}"
    assert swapped != raw_key
    assert_rejected(post(**bearer(swapped)))
    assert_rejected(post(**bearer(raw_key.upper())))


@pytest.mark.django_db
def test_authorization_header_wins_over_x_api_key(raw_key):
    assert_ok_empty(post(HTTP_X_API_KEY="rk_nope_nope", **bearer(raw_key)))
    assert_rejected(post(HTTP_X_API_KEY=raw_key, **bearer("rk_nope_nope")))
    assert_rejected(
        post(HTTP_X_API_KEY=raw_key, HTTP_AUTHORIZATION=f"Basic {raw_key}"),
        message="The Authorization header must be 'Bearer <api key>'.",
    )


@pytest.mark.django_db
def test_blank_x_api_key_counts_as_missing(client):
    response = post(client, HTTP_X_API_KEY="   ")
    assert_rejected(response, 401, "missing_api_key", "Authentication credentials were not provided.")
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.django_db
def test_credentials_are_checked_before_the_body_is_read():
    # Neither a broken body nor an unsupported media type is looked at before the caller is known.
    response = APIClient().post(URL, data="{not json", content_type="application/json")
    assert_rejected(response, 401, "missing_api_key", "Authentication credentials were not provided.")
    response = APIClient().post(URL, data="x", content_type="text/plain", HTTP_AUTHORIZATION="Bearer rk_a_b")
    assert_rejected(response, 403)


# --- which tenant ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_the_key_decides_the_tenant(embedder):
    owner, other = TenantFactory(), TenantFactory()
    kb = KnowledgeBaseFactory(tenant=owner)
    chunks = ChunkFactory.create_batch(3, document=DocumentFactory(knowledge_base=kb))
    owner_key, other_key = create_api_key(tenant=owner).raw_key, create_api_key(tenant=other).raw_key
    body = json.dumps({"query": "passage", "kb_ids": [kb.pk]})

    own = post(body=body, **bearer(owner_key))
    assert own.status_code == 200
    assert sorted(hit["chunk_id"] for hit in own.json()["results"]) == sorted(c.pk for c in chunks)

    foreign = post(body=body, HTTP_X_API_KEY=other_key)
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "knowledge_base_not_found"
    # Without kb_ids the other tenant simply has nothing to search.
    assert_ok_empty(post(body=json.dumps({"query": "passage"}), **bearer(other_key)))


@pytest.mark.django_db
def test_a_prefix_paired_with_another_keys_secret_is_rejected():
    first, second = create_api_key(tenant=TenantFactory()), create_api_key(tenant=TenantFactory())
    spliced = f"rk_{first.api_key.prefix}_{second.raw_key.split('_', 2)[2]}"
    assert_rejected(post(**bearer(spliced)))
    assert_ok_empty(post(**bearer(first.raw_key)))


# --- key and tenant lifecycle ---------------------------------------------------------------------


@pytest.mark.django_db
def test_a_revoked_key_is_rejected_on_the_very_next_request(tenant):
    issued, sibling = create_api_key(tenant=tenant), create_api_key(tenant=tenant)
    client = APIClient()
    client.credentials(**bearer(issued.raw_key))
    assert_ok_empty(post(client))

    revoke_api_key(issued.api_key)
    assert_rejected(post(client))
    assert_rejected(post(HTTP_X_API_KEY=issued.raw_key))
    assert_ok_empty(post(**bearer(sibling.raw_key)))  # only that key is revoked


@pytest.mark.django_db
def test_revocation_written_by_another_process_takes_effect_immediately(tenant, raw_key):
    assert_ok_empty(post(**bearer(raw_key)))
    ApiKey.objects.filter(tenant=tenant).update(revoked_at=timezone.now())
    assert_rejected(post(**bearer(raw_key)))


@pytest.mark.django_db
def test_a_remembered_key_is_rechecked_with_one_small_query(tenant, raw_key):
    assert_ok_empty(post(**bearer(raw_key)))
    with CaptureQueriesContext(connection) as captured:
        assert_ok_empty(post(**bearer(raw_key)))
    key_queries = [q["sql"] for q in captured.captured_queries if ApiKey._meta.db_table in q["sql"]]
    assert len(key_queries) == 1 and "key_hash" not in key_queries[0]


@pytest.mark.django_db
def test_using_a_key_records_its_last_use_without_a_write_per_request(tenant, raw_key):
    before = timezone.now()
    assert_ok_empty(post(**bearer(raw_key)))
    (api_key,) = ApiKey.objects.filter(tenant=tenant)
    assert before <= api_key.last_used_at <= timezone.now()
    with CaptureQueriesContext(connection) as captured:
        for _ in range(3):
            assert_ok_empty(post(**bearer(raw_key)))
    writes = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    assert writes == []
    ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=before - timedelta(minutes=5))
    forget_api_keys()  # as another process would, after its remembered keys expired
    assert_ok_empty(post(**bearer(raw_key)))
    assert ApiKey.objects.get(pk=api_key.pk).last_used_at >= before


@pytest.mark.django_db
def test_what_gates_access_applies_at_once_to_a_remembered_key(tenant, raw_key):
    """Written without model signals, as another process would: the re-check must see it."""
    assert_ok_empty(post(**bearer(raw_key)))
    ApiKey.objects.filter(tenant=tenant).update(scopes=[])
    assert post(**bearer(raw_key)).json()["error"]["code"] == "insufficient_scope"
    ApiKey.objects.filter(tenant=tenant).update(scopes=["search"])
    assert_ok_empty(post(**bearer(raw_key)))
    Tenant.objects.filter(pk=tenant.pk).update(is_active=False)
    assert_rejected(post(**bearer(raw_key)))


@pytest.mark.django_db
def test_expiry(tenant):
    expired = create_api_key(tenant=tenant, expires_at=timezone.now() - timedelta(seconds=1))
    assert_rejected(post(**bearer(expired.raw_key)))

    later = create_api_key(tenant=tenant, expires_at=timezone.now() + timedelta(hours=1))
    assert_ok_empty(post(**bearer(later.raw_key)))
    ApiKey.objects.filter(pk=later.api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_rejected(post(**bearer(later.raw_key)))


@pytest.mark.django_db
def test_inactive_tenants_keys_are_rejected_until_reactivated(tenant):
    keys = [create_api_key(tenant=tenant).raw_key for _ in range(2)]
    for raw_key in keys:
        assert_ok_empty(post(**bearer(raw_key)))

    tenant.is_active = False
    tenant.save(update_fields=["is_active"])
    for raw_key in keys:
        assert_rejected(post(**bearer(raw_key)))
        assert_rejected(post(HTTP_X_API_KEY=raw_key))

    tenant.is_active = True
    tenant.save(update_fields=["is_active"])
    assert_ok_empty(post(**bearer(keys[0])))


@pytest.mark.django_db
def test_a_deleted_key_or_tenant_is_rejected():
    doomed_key = create_api_key(tenant=TenantFactory())
    doomed_key.api_key.delete()
    assert_rejected(post(**bearer(doomed_key.raw_key)))

    tenant = TenantFactory()
    raw_key = create_api_key(tenant=tenant).raw_key
    tenant.delete()
    assert_rejected(post(**bearer(raw_key)))


@pytest.mark.django_db
def test_rejections_do_not_reveal_why(tenant):
    """Unknown, tampered, revoked, expired and inactive-tenant keys all get the same answer."""
    revoked = create_api_key(tenant=tenant)
    revoke_api_key(revoked.api_key)
    expired = create_api_key(tenant=tenant, expires_at=timezone.now() - timedelta(days=1))
    inactive = create_api_key(tenant=TenantFactory(is_active=False))
    valid = create_api_key(tenant=tenant).raw_key
    candidates = [revoked.raw_key, expired.raw_key, inactive.raw_key, valid[:-2], "rk_0123456789ab_x", "garbage"]
    answers = set()
    for raw_key in candidates:
        response = post(**bearer(raw_key))
        error = response.json()["error"]
        answers.add((response.status_code, error["code"], error["message"]))
        assert re.fullmatch(r"[0-9a-f]{32}", error["request_id"])
    assert answers == {(403, "invalid_api_key", INVALID_KEY)}
