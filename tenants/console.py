"""The console's tenant dashboard: what the tenant was served (``core.usage``) and what it consumed
(``core.cost``) beside its rate tier. Registered as an admin view by ``tenants.admin``."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from core.charts import Series, line_chart
from core.cost import tenant_costs
from core.usage import query_usage
from tenants.models import RATE_LIMITED_ENDPOINTS
from tenants.selectors import tenants_visible_to

DASHBOARD_COST_DAYS = 14


def dashboard_view(request: HttpRequest, context: dict[str, Any], tenant_id: int) -> TemplateResponse:
    tenant = get_object_or_404(tenants_visible_to(request.user).select_related("rate_tier"), pk=tenant_id)
    usage = query_usage(tenant.pk)
    tier = tenant.rate_tier
    window = usage["window"] if usage else {}
    limits = [
        {"endpoint": endpoint, "limit": tier.limit_for(endpoint), "used": window.get(endpoint, 0)}
        for endpoint in RATE_LIMITED_ENDPOINTS
    ]
    busiest = max((row["total"] for row in usage["daily"]), default=0) if usage else 0
    costs = tenant_costs(tenant.pk, days=DASHBOARD_COST_DAYS) if usage else None
    for cost in [*costs["daily"], costs["total"]] if costs else ():  # the LLM's purposes together
        for direction in ("in", "out"):
            cost[f"llm_{direction}"] = sum(
                n for kind, n in cost["units"].items() if kind.endswith(f"_tokens_{direction}")
            )
    charts = _trend_charts(usage["daily"]) if usage else {}
    context.update(
        tenant=tenant, usage=usage, charts=charts, limits=limits, busiest=busiest, window_s=settings.RATE_LIMIT_WINDOW_S,
        costs=costs, cost_days=DASHBOARD_COST_DAYS, title=f"Dashboard: {tenant.name}",
    )  # fmt: skip
    return TemplateResponse(request, "admin/tenants/dashboard.html", context)


def _trend_charts(daily: list[dict[str, Any]]) -> dict[str, Any]:
    """The daily rows as SVG line charts: queries per day, the share answered from the cache, and the
    p50 and p95 latency (the last two of days with searches only: a day without any has no point, not a
    zero, and the lines break over it). x is the day's position, oldest first; its date is the tick."""
    ticks = [(float(i), row["date"][5:]) for i, row in enumerate(daily) if i % max(len(daily) // 7, 1) == 0]
    every_day = (0.0, float(max(len(daily) - 1, 1)))  # on the x axis, with a point or not
    busiest = max((row["total"] for row in daily), default=0)
    volume = Series("queries", [(float(i), float(row["total"])) for i, row in enumerate(daily)], "volume")
    hits = [
        (float(i), float(row["cache_hit_ratio"])) for i, row in enumerate(daily) if row["cache_hit_ratio"] is not None
    ]
    latencies = [(float(i), row["latency_ms"]) for i, row in enumerate(daily) if row["latency_ms"] is not None]
    p50, p95 = ([(x, float(ms[share])) for x, ms in latencies] for share in ("p50", "p95"))
    slowest = max((y for _, y in p95), default=0.0)
    days_chart = partial(line_chart, x_label="day (UTC)", x_range=every_day, x_ticks=ticks, max_step=1.0)
    return {
        "volume": days_chart([volume], chart_id="daily-volume", title="queries per day",
                             y_range=(0.0, float(max(busiest, 1)))),
        "cache": days_chart([Series("cache hit ratio", hits, "cache")], chart_id="daily-cache-hits",
                            title="share of searches answered from the cache"),
        "latency": days_chart([Series("p50 ms", p50, "latency-p50"), Series("p95 ms", p95, "latency-p95")],
                              chart_id="daily-latency", title="search latency per day (ms, server side)",
                              y_range=(0.0, _axis_top(slowest))),
    }  # fmt: skip


def _axis_top(value: float) -> float:
    """The least 1, 2 or 5 times a power of ten at or above ``value`` (1 for none): an axis's top, and
    its middle tick, that read at a glance."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)
