"""``GET /api/v1/stats``: what a tenant holds, the queries it was served and what it consumed."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.ratelimit import RateLimitedMixin
from core.schema import STATS_COST_EXAMPLE, error_responses
from knowledge.selectors.api import tenant_stats
from knowledge.serializers import StatsOutput
from tenants.authentication import HasTenant
from tenants.models import Scope
from tenants.permissions import HasScope
from tenants.requests import TenantRequest


class StatsView(RateLimitedMixin, APIView):
    """``GET /api/v1/stats``: counts for the tenant of the API key (a ``search`` key: the usage it serves)."""

    permission_classes = [HasTenant, HasScope]
    required_scope = Scope.SEARCH

    def rate_limit_endpoint(self, request: Request) -> str:
        return "stats"

    @extend_schema(
        summary="Usage statistics of the caller's tenant",
        description=(
            "Knowledge bases, documents by status, searchable chunks, queries served with their cache hit "
            "ratio, and `cost`: the units the tenant's requests, ingestions and version builds consumed on each of "
            "the last 30 days (UTC), priced by the `COST_PRICE_*` settings. Counters live in Redis and count from "
            "when it started; `queries` and `cost` are null while it is unreachable."
        ),
        responses={200: StatsOutput, **error_responses(401, 403, 429, 503)},
        examples=[
            OpenApiExample(
                "Stats",
                response_only=True,
                value={
                    "tenant": "acme",
                    "knowledge_bases": 2,
                    "documents": {"total": 41, "by_status": {"pending": 0, "ready": 40, "failed": 1}},
                    "chunks": 388,
                    "queries": {"served": 1250, "cache_hits": 310, "cache_hit_ratio": 0.248},
                    "cost": STATS_COST_EXAMPLE,
                },
            )
        ],
    )
    def get(self, request: TenantRequest) -> Response:
        return Response(
            StatsOutput(tenant_stats(request.tenant, request.auth.reachable_kb_ids, request.auth.listing_reader())).data
        )
