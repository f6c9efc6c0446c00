"""``GET /api/v1/stats`` access: the ``search`` scope, its own rate-limit counter (its counts:
core/test_health.py, core/test_cost.py)."""

import pytest

from tenants.models import RateTier
from tests.conftest import client_for

STATS_URL = "/api/v1/stats"


@pytest.mark.django_db
@pytest.mark.parametrize("scopes", [["ingest"], ["admin"], ["ingest", "admin"]])
def test_stats_need_the_search_scope(tenant, api_client, scopes):
    response = client_for(tenant, *scopes).get(STATS_URL)
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "insufficient_scope"
    assert api_client.get(STATS_URL).status_code == 200


@pytest.mark.django_db
def test_stats_are_rate_limited_on_their_own_counter(tenant, api_client):
    tenant.rate_tier = RateTier.objects.create(name="stats-2", requests_per_window=100, endpoint_limits={"stats": 2})
    tenant.save(update_fields=["rate_tier"])
    assert [api_client.get(STATS_URL).status_code for _ in range(3)] == [200, 200, 429]
    limited = api_client.get(STATS_URL)
    assert limited.json()["error"]["code"] == "rate_limited" and int(limited["Retry-After"]) > 0
    searched = api_client.post("/api/v1/retrieval/bm25", {"query": "refund"}, format="json")
    assert searched.status_code == 200 and searched["X-RateLimit-Limit"] == "100"
