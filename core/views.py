"""Operational endpoints: ``/health`` (liveness) and ``/ready`` (readiness); ``/metrics`` is in ``core.metrics``;
``/favicon.ico``, which every browser asks for."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
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


# A magnifier over a page, in the admin's blue (an SVG: browsers take any image type at /favicon.ico).
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect x="4" y="2" width="18" height="24" rx="2" fill="#417690"/>'
    '<circle cx="19" cy="19" r="7" fill="#fff" stroke="#205067" stroke-width="3"/>'
    '<line x1="24" y1="24" x2="30" y2="30" stroke="#205067" stroke-width="4" stroke-linecap="round"/></svg>'
)


@require_GET
def favicon_view(request: HttpRequest) -> HttpResponse:
    """The console's icon; without it every page load logged a 404."""
    response = HttpResponse(FAVICON_SVG, content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response
