"""Rate limits through the real API, counted in the real embedded Redis, tiers from the database."""

from __future__ import annotations

import itertools
import json
import time
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from tenants.models import FREE_TIER, RATE_LIMITED_ENDPOINTS, RateTier, Tenant
from tests.concurrency import wait_until
from tests.conftest import client_for
from tests.factories import TenantFactory

BODY = json.dumps({"query": "hello"})
LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")


def post(client: APIClient, path: str = "vector", body: str = BODY, **headers):
    return client.post(f"/api/v1/retrieval/{path}", data=body, content_type="application/json", **headers)


def usage(response) -> tuple[int, int, int]:
    return tuple(int(response[name]) for name in LIMIT_HEADERS)


@pytest.fixture
def tiny_tier(tenant) -> RateTier:
    tier = RateTier.objects.create(name="tiny", requests_per_window=3, endpoint_limits={"hybrid": 2})
    tenant.rate_tier = tier
    tenant.save(update_fields=["rate_tier"])
    return tier


def assert_rate_limited(response, window: int = 86_400):  # the suite's day-long windows
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["request_id"] == response["X-Request-ID"]
    assert 0 < int(response["Retry-After"]) <= window
    assert response["X-RateLimit-Remaining"] == "0"
    assert response["X-RateLimit-Reset"] == response["Retry-After"]


@pytest.mark.django_db
def test_every_response_carries_the_limit_and_what_remains(tiny_tier, api_client):
    for remaining in (2, 1, 0):
        response = post(api_client)
        assert response.status_code == 200
        limit, left, reset = usage(response)
        assert (limit, left) == (3, remaining)
        assert 0 < reset <= 86_400


@pytest.mark.django_db
def test_over_the_limit_is_429_with_retry_after(tiny_tier, api_client):
    for _ in range(3):
        assert post(api_client).status_code == 200
    response = post(api_client)
    assert_rate_limited(response)
    assert response.json()["error"]["message"].startswith("Rate limit of 3 vector requests per 86400 s exceeded.")


@pytest.mark.django_db
def test_error_responses_carry_the_headers_too(tiny_tier, api_client):
    response = post(api_client, body=json.dumps({"query": "x", "top_k": 0}))
    assert response.status_code == 400
    assert usage(response)[:2] == (3, 2)


@pytest.mark.django_db
def test_windows_roll_over(tiny_tier, api_client, settings):
    settings.RATE_LIMIT_WINDOW_S = 2
    while (response := post(api_client)).status_code == 200:
        pass
    assert_rate_limited(response, window=2)

    def admitted():  # refused until the next window starts
        response = post(api_client)
        return response if response.status_code == 200 else None

    fresh = wait_until(admitted, interval=0.1, message="the next rate-limit window")
    assert usage(fresh)[:2] == (3, 2)


@pytest.mark.django_db
def test_a_call_that_runs_past_its_window_keeps_its_headers(tiny_tier, api_client, monkeypatch, settings):
    """django-ratelimit reads the clock twice (the window, then the time left in it): a call slower than
    the rest of its window reads a negative time left, which is no counter failure."""
    import django_ratelimit.core

    settings.RATE_LIMIT_WINDOW_S = 2
    now = time.time()
    readings = itertools.chain([now], itertools.repeat(now + 120))  # the window, then two minutes later
    monkeypatch.setattr(django_ratelimit.core, "time", SimpleNamespace(time=lambda: next(readings)))
    response = post(api_client)
    assert response.status_code == 200
    assert usage(response) == (3, 2, 1)  # counted; the window has rolled over: reset within a second


@pytest.mark.django_db
def test_endpoint_overrides_count_per_search_mode(tiny_tier, api_client):
    assert usage(post(api_client, "hybrid"))[:2] == (2, 1)
    # /search in hybrid mode (its default) counts against the same hybrid limit.
    assert usage(post(api_client, "search"))[:2] == (2, 0)
    assert_rate_limited(post(api_client, "search", body=json.dumps({"query": "x", "mode": "hybrid"})))
    # Other modes keep their own counters at the tier's default limit.
    assert usage(post(api_client, "search", body=json.dumps({"query": "x", "mode": "bm25"})))[:2] == (3, 2)
    assert usage(post(api_client, "vector"))[:2] == (3, 2)


@pytest.mark.django_db
def test_counters_are_per_tenant_not_per_key(tiny_tier, tenant, api_client):
    for _ in range(3):
        post(api_client)
    assert_rate_limited(post(api_client))
    assert_rate_limited(post(client_for(tenant)))  # another key of the same tenant
    other = TenantFactory(rate_tier=tiny_tier)
    assert usage(post(client_for(other)))[:2] == (3, 2)


@pytest.mark.django_db
def test_tier_changes_in_the_database_apply_to_the_next_request(tiny_tier, api_client):
    assert usage(post(api_client))[:2] == (3, 2)
    tiny_tier.requests_per_window = 10
    tiny_tier.save()
    assert usage(post(api_client))[:2] == (10, 9)  # a new limit starts a new counter


@pytest.mark.django_db
def test_unauthenticated_calls_are_limited_per_ip(settings):
    settings.RATE_LIMIT_ANONYMOUS = 2
    missing = post(APIClient())
    assert missing.status_code == 401 and usage(missing)[:2] == (2, 1)
    bad_key = post(APIClient(), HTTP_AUTHORIZATION="Bearer rk_nope_nope")
    assert bad_key.status_code == 403 and usage(bad_key)[:2] == (2, 0)
    response = post(APIClient())
    assert_rate_limited(response)
    assert "unauthenticated requests from this address" in response.json()["error"]["message"]
    assert post(APIClient(), REMOTE_ADDR="203.0.113.9").status_code == 401  # another address, another counter


@pytest.mark.django_db
def test_default_tiers_and_new_tenants_on_free():
    free, premium = RateTier.objects.get(name=FREE_TIER), RateTier.objects.get(name="premium")
    assert (free.requests_per_window, premium.requests_per_window) == (100, 1000)
    for tier in (free, premium):
        assert tier.endpoint_limits == {"hybrid": 50}  # migration 0003 removed the limit of a graph mode to come
    assert free.limit_for("hybrid") == 50 and free.limit_for("vector") == 100
    assert Tenant.objects.create(name="newcomer").rate_tier == free


@pytest.mark.django_db
def test_the_free_tier_is_recreated_for_new_tenants_if_deleted():
    Tenant.objects.update(rate_tier=RateTier.objects.create(name="spare", requests_per_window=1))
    RateTier.objects.filter(name=FREE_TIER).delete()  # tiers in use are protected
    tenant = Tenant.objects.create(name="newcomer")
    assert tenant.rate_tier.name == FREE_TIER and tenant.rate_tier.limit_for("hybrid") == 50


@pytest.mark.django_db
@pytest.mark.parametrize(
    "limits", [{"hybrid": 0}, {"hybrid": "50"}, {"hybrid": True}, ["hybrid"], {"graph": -2}, {"search": 5}]
)
def test_endpoint_limits_map_existing_endpoints_to_positive_integers(limits):
    with pytest.raises(ValidationError, match="endpoint_limits"):
        RateTier(name="bad", requests_per_window=10, endpoint_limits=limits).full_clean()


# --- Redis unavailable -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_redis_down_fails_open_by_default(private_redis, api_client, caplog):
    assert usage(post(api_client))[1] == 99
    private_redis()
    for _ in range(2):
        response = post(api_client)
        assert response.status_code == 200
        assert not any(name in response for name in LIMIT_HEADERS)
    warnings = [r for r in caplog.records if "rate limiting degraded" in r.getMessage()]
    assert len(warnings) == 1  # once per interval, not per request


@pytest.mark.django_db
def test_redis_down_fails_closed_when_configured(private_redis, api_client, settings):
    settings.RATE_LIMIT_FAIL_OPEN = False
    assert post(api_client).status_code == 200
    private_redis()
    response = post(api_client)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "rate_limiter_unavailable"
    assert response["Retry-After"] == "5"


@pytest.mark.django_db
def test_redis_down_and_failing_closed_still_answers_a_missing_or_bad_key_first(private_redis, settings):
    settings.RATE_LIMIT_FAIL_OPEN = False
    private_redis()
    missing = post(APIClient())
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
    bad = post(APIClient(HTTP_AUTHORIZATION="Bearer not-a-key"))
    assert bad.status_code == 403 and bad.json()["error"]["code"] == "invalid_api_key"


def test_tiers_limit_exactly_the_counters_the_api_counts():
    """A tier may only hold limits that something counts: one counter per search mode, stats', and the
    knowledge API's for reads and writes."""
    from rest_framework.test import APIRequestFactory

    from knowledge.stats_views import StatsView
    from knowledge.views import KnowledgeApiViewSet
    from retrieval.serializers import ModeSearchInput

    requests = APIRequestFactory()
    knowledge = {KnowledgeApiViewSet().rate_limit_endpoint(requests.generic(method, "/")) for method in ("GET", "POST")}
    counters = set(ModeSearchInput().fields["mode"].choices) | {StatsView().rate_limit_endpoint(None)} | knowledge
    assert counters == set(RATE_LIMITED_ENDPOINTS)


@pytest.mark.django_db
def test_the_graph_limit_counts_graph_searches_on_either_endpoint(api_client, tenant):
    tenant.rate_tier = RateTier.objects.create(name="graph-1", requests_per_window=5, endpoint_limits={"graph": 1})
    tenant.save(update_fields=["rate_tier"])
    assert post(api_client, "graph").status_code == 200
    assert_rate_limited(post(api_client, "search", body=json.dumps({"query": "x", "mode": "graph"})))
    assert post(api_client, "bm25").status_code == 200
