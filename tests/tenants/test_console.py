"""The tenant dashboard through the admin, fed by real searches through the API."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.template.defaultfilters import floatformat

from tenants.console import _axis_top
from tests.conftest import client_for
from tests.factories import ChunkFactory

pytestmark = pytest.mark.django_db


def dashboard(client, tenant):
    return client.get(f"/admin/tenants/tenant/{tenant.pk}/dashboard/")


def test_a_tenant_without_searches_says_how_to_get_some(admin_client, tenant):
    page = dashboard(admin_client, tenant)
    assert page.status_code == 200
    html = page.content.decode()
    assert "No searches yet" in html and f'href="/admin/tenants/tenant/{tenant.pk}/dashboard/"' not in html
    listing = admin_client.get("/admin/tenants/tenant/").content.decode()
    assert f'href="/admin/tenants/tenant/{tenant.pk}/dashboard/" class="dashboard-link"' in listing


def test_searches_through_the_api_show_on_the_dashboard(admin_client):
    chunk = ChunkFactory(content="kettle descaling")  # in pgvector only: BM25 finds nothing
    api = client_for(chunk.tenant)
    latencies = []  # the server's own, as each answer says
    for query, mode in [("kettle", "vector"), ("kettle", "vector"), ("teapot", "bm25")]:
        response = api.post(f"/api/v1/retrieval/{mode}", data=json.dumps({"query": query}),
                            content_type="application/json")  # fmt: skip
        assert response.status_code == 200
        latencies.append(response.json()["latency_ms"])
    usage = dashboard(admin_client, chunk.tenant).context["usage"]
    today = usage["daily"][-1]
    assert (today["modes"], today["cache_hit_ratio"]) == ({"bm25": 1, "vector": 2}, round(1 / 3, 4))
    assert usage["top_queries"] == [("kettle", 2), ("teapot", 1)]
    assert usage["no_result_queries"] == [("teapot", 1)]
    assert usage["latency_ms"]["searches"] == 3
    html = dashboard(admin_client, chunk.tenant).content.decode()
    volume = re.findall(r'<circle class="point volume" data-series="queries" data-x="([^"]+)" data-y="([^"]+)"', html)
    assert [float(y) for _, y in volume] == [row["total"] for row in usage["daily"]]  # the chart draws the table
    cache = re.findall(
        r'<circle class="point cache" data-series="cache hit ratio" data-x="[^"]+" data-y="([^"]+)"', html
    )
    assert [float(y) for y in cache] == [
        row["cache_hit_ratio"] for row in usage["daily"] if row["cache_hit_ratio"] is not None
    ]
    # Today's p50/p95 are the answers' 2nd and 3rd latencies, read from the day's histogram: at most its
    # 5 % bucket above (and 0.01 ms of rounding). The chart draws the table's figures, today's only.
    ordered = sorted(latencies)
    for share, exact in (("p50", ordered[1]), ("p95", ordered[2])):
        assert exact - 0.01 <= today["latency_ms"][share] <= exact * 1.05 + 0.01, (share, latencies, today)
    assert [row["latency_ms"] for row in usage["daily"][:-1]] == [None] * 13
    for share in ("p50", "p95"):
        points = re.findall(
            rf'<circle class="point latency-{share}" data-series="{share} ms" data-x="([^"]+)" data-y="([^"]+)"', html
        )
        assert [(float(x), float(y)) for x, y in points] == [(13.0, today["latency_ms"][share])]
    row = re.search(r'<td class="latency">([^<]+)</td></tr>\s*</table>', html).group(1)
    assert row == f"{floatformat(today['latency_ms']['p50'], 1)} / {floatformat(today['latency_ms']['p95'], 1)} ms"
    limits = {row["endpoint"]: row for row in dashboard(admin_client, chunk.tenant).context["limits"]}
    assert (limits["vector"]["used"], limits["bm25"]["used"], limits["hybrid"]["used"]) == (2, 1, 0)
    assert limits["bm25"]["limit"] == chunk.tenant.rate_tier.limit_for("bm25")


def test_staff_without_the_tenant_permission_get_a_404(client, tenant):
    client.force_login(User.objects.create_user("curator", is_staff=True))
    assert dashboard(client, tenant).status_code == 404


def test_the_latency_axis_tops_at_a_round_figure_over_the_slowest_day():
    assert [_axis_top(ms) for ms in (0.0, 0.3, 1.0, 44.95, 120.0, 5000.0)] == [1.0, 0.5, 1.0, 50.0, 200.0, 5000.0]
