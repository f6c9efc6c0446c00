"""The console's tenant dashboard: what the tenant was served (``core.usage``) and what it consumed
(``core.cost``) beside its rate tier. Registered as an admin view by ``tenants.admin``."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from core.cost import tenant_costs
from core.usage import query_usage
from tenants.models import RATE_LIMITED_ENDPOINTS
from tenants.selectors import tenants_visible_to

DASHBOARD_COST_DAYS = 14


def dashboard_view(request, context: dict, tenant_id: int) -> TemplateResponse:
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
    context.update(
        tenant=tenant, usage=usage, limits=limits, busiest=busiest, window_s=settings.RATE_LIMIT_WINDOW_S,
        costs=costs, cost_days=DASHBOARD_COST_DAYS, title=f"Dashboard: {tenant.name}",
    )  # fmt: skip
    return TemplateResponse(request, "admin/tenants/dashboard.html", context)
