"""Prometheus metrics of the search service, on top of django-prometheus's HTTP and model metrics.

Recorded here: request latency by endpoint and mode, the latency of each pipeline stage, cache
hits and misses, rate-limited requests, degradations (and reranker fallbacks) by cause, and
ingestion outcomes. ``/metrics`` answers only allowed addresses or a bearer token.

With several gunicorn workers every worker keeps its own counters; set ``PROMETHEUS_MULTIPROC_DIR``
(``./run serve`` does when ``WEB_WORKERS`` > 1) so prometheus_client sums them across processes.
"""
from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django_prometheus.exports import ExportToDjangoView
from prometheus_client import Counter, Histogram

from core.errors import error_body
from core.logging import tenant_of
from core.usage import ServedQuery, count_query

# URL names of the search endpoints (retrieval/urls.py): their 200s are queries served.
SEARCH_ENDPOINTS = frozenset({"retrieval-vector", "retrieval-bm25", "retrieval-hybrid", "retrieval-search"})
# From 1 ms (a cache hit) to 10 s (past any deadline).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

REQUEST_LATENCY = Histogram(
    "retrieval_request_latency_seconds",
    "Time to answer a request, by URL name and search mode (empty for non-search answers).",
    ["endpoint", "mode"],
    buckets=LATENCY_BUCKETS,
)
STAGE_LATENCY = Histogram(
    "retrieval_search_stage_seconds",
    "Time spent in one stage of the search pipeline (expand, embed, vector, bm25, fuse, rerank, total).",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
CACHE_REQUESTS = Counter("retrieval_cache_requests", "Search cache lookups, by result (hit or miss).", ["result"])
RATE_LIMITED = Counter("retrieval_rate_limited_requests", "Requests refused with 429, by endpoint.", ["endpoint"])
DEGRADED = Counter(
    "retrieval_search_degraded", "Searches answered without one of their parts, by stage and cause.", ["stage", "cause"]
)
RERANK_FALLBACKS = Counter(
    "retrieval_rerank_fallbacks", "Reranks that fell back to the fused order, by cause.", ["cause"]
)
INGESTED_DOCUMENTS = Counter(
    "retrieval_ingest_documents",
    "Documents seen by ingestion, by outcome (added, unchanged, replaced, failed).",
    ["outcome"],
)
INGESTED_CHUNKS = Counter("retrieval_ingest_chunks", "Chunks written by ingestion.")

INGEST_OUTCOMES = ("added", "unchanged", "replaced", "failed")


def record_search(timings_ms: dict[str, float], degraded: list[dict[str, Any]]) -> None:
    """Called once per search pipeline run (a cache hit runs no stage, so records nothing here)."""
    for stage, milliseconds in timings_ms.items():
        STAGE_LATENCY.labels(stage).observe(milliseconds / 1000)
    for degradation in degraded:
        DEGRADED.labels(degradation["stage"], degradation["cause"]).inc()
        if degradation["stage"] == "rerank":
            RERANK_FALLBACKS.labels(degradation["cause"]).inc()


def record_cache(hit: bool) -> None:
    CACHE_REQUESTS.labels("hit" if hit else "miss").inc()


def record_rate_limited(endpoint: str) -> None:
    RATE_LIMITED.labels(endpoint).inc()


def record_ingest(outcomes: dict[str, int], chunks: int) -> None:
    """``outcomes``: documents by outcome (added, unchanged, replaced, failed)."""
    for outcome in INGEST_OUTCOMES:
        if count := outcomes.get(outcome, 0):
            INGESTED_DOCUMENTS.labels(outcome).inc(count)
    INGESTED_CHUNKS.inc(chunks)


class MetricsMiddleware:
    """Request latency by endpoint and mode, 429s, cache hits, and each tenant's served queries.

    Reads what the search views answer (``mode``, and ``cached`` when the response cache sets it)
    instead of asking every view to report, so a new search endpoint is measured as it is.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        seconds = time.perf_counter() - started
        match = getattr(request, "resolver_match", None)
        endpoint = (match.url_name if match else None) or "unmatched"
        data = getattr(response, "data", None)
        payload = data if isinstance(data, dict) else {}
        REQUEST_LATENCY.labels(endpoint, str(payload.get("mode") or "")).observe(seconds)
        if response.status_code == 429:
            record_rate_limited(endpoint)
        if endpoint in SEARCH_ENDPOINTS and response.status_code == 200:
            cached = payload.get("cached")
            if cached is not None:
                record_cache(bool(cached))
            tenant = tenant_of(request)
            if tenant is not None:
                # When the response is closed, i.e. once the server has sent it: the client does not
                # wait for the dashboard's counters (added to the process's sums, core.usage). Django's
                # test client and every WSGI server close each response; Django's own resources too.
                response._resource_closers.append(  # type: ignore[attr-defined]  # Django runs them on close()
                    partial(count_query, tenant.pk, _served(payload, endpoint))
                )
        return response


def _served(payload: dict[str, Any], endpoint: str) -> ServedQuery:
    """What the usage counters keep of a search response (``retrieval.views.SearchView``'s body)."""
    queries = payload.get("queries") or [{}]
    return ServedQuery(
        mode=str(payload.get("mode") or endpoint),
        cached=bool(payload.get("cached")),
        latency_ms=float(payload.get("latency_ms") or 0),
        query=str(queries[0].get("text", "")),
        hits=int(payload.get("total") or 0),
        degraded_stages=tuple(str(item.get("stage")) for item in payload.get("degraded") or ()),
    )


def _client_allowed(remote_addr: str) -> bool:
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 when the server listens on an IPv6 socket
    return any(address in ipaddress.ip_network(item, strict=False) for item in settings.METRICS_ALLOWED_IPS)


def _token_matches(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus text format, for allowed addresses or ``Bearer METRICS_TOKEN``.

    The address is the TCP peer (``REMOTE_ADDR``); ``X-Forwarded-For`` is ignored because any client
    can send it.
    """
    if not (_token_matches(request) or _client_allowed(request.META.get("REMOTE_ADDR", ""))):
        message = "Metrics are only served to allowed addresses or with the metrics token."
        return JsonResponse(error_body("forbidden", message, request), status=403)
    response: HttpResponse = ExportToDjangoView(request)
    return response
