"""Operational endpoints: ``/health`` (liveness), ``/ready`` (readiness) and ``/api/v1/stats``."""
from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from retrieval.health import readiness
from retrieval.schema import error_responses
from retrieval.stats import tenant_stats


@require_GET
def health_view(request: HttpRequest) -> JsonResponse:
    """Liveness: answers without touching the database or any engine."""
    return JsonResponse({"status": "ok"})


@require_GET
def ready_view(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when ready or degraded, 503 naming the failed checks otherwise."""
    status, checks = readiness()
    return JsonResponse({"status": status, "checks": checks}, status=503 if status == "not_ready" else 200)


class DocumentCountsOutput(serializers.Serializer):
    total = serializers.IntegerField()
    by_status = serializers.DictField(child=serializers.IntegerField(), help_text="every document status, 0 when none")


class QueryCountsOutput(serializers.Serializer):
    served = serializers.IntegerField(help_text="successful searches since the counter started")
    cache_hits = serializers.IntegerField()
    cache_hit_ratio = serializers.FloatField(allow_null=True, help_text="null before the first query")


class StatsOutput(serializers.Serializer):
    tenant = serializers.CharField()
    knowledge_bases = serializers.IntegerField()
    documents = DocumentCountsOutput()
    chunks = serializers.IntegerField(help_text="searchable chunks (in the active version of each knowledge base)")
    queries = QueryCountsOutput(allow_null=True, help_text="null while the cache (Redis) is unreachable")


class StatsView(APIView):
    """``GET /api/v1/stats``: counts for the tenant of the API key."""

    @extend_schema(
        summary="Usage statistics of the caller's tenant",
        description=(
            "Knowledge bases, documents by status, searchable chunks, and queries served with their cache hit "
            "ratio. Query counters live in Redis and count from when it started; `queries` is null while it is "
            "unreachable."
        ),
        responses={200: StatsOutput, **error_responses(401, 403)},
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
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        return Response(StatsOutput(tenant_stats(request.tenant)).data)
