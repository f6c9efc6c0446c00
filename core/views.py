"""Operational endpoints: ``/health`` (liveness) and ``/ready`` (readiness); ``/metrics`` is in ``core.metrics``."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from core.health import readiness


@require_GET
def health_view(request: HttpRequest) -> JsonResponse:
    """Liveness: answers without touching the database or any engine."""
    return JsonResponse({"status": "ok"})


@require_GET
def ready_view(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when ready or degraded, 503 naming the failed checks otherwise."""
    status, checks = readiness()
    return JsonResponse({"status": status, "checks": checks}, status=503 if status == "not_ready" else 200)
