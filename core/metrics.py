"""Prometheus metrics of the search service, on top of django-prometheus's HTTP and model metrics.

Recorded here: request latency by endpoint and mode, the latency of each pipeline stage, cache
hits and misses, rate-limited requests, degradations (and reranker fallbacks) by cause, ingestion
outcomes, whether a circuit breaker is open, searches the search analytics dropped, and the units
consumed and their priced amounts by kind (``core.cost``; no tenant label, like the others: per-tenant
sums are in ``GET /api/v1/stats`` and the console). ``/metrics``
answers only allowed addresses or a bearer token.

With several gunicorn workers every worker keeps its own counters; set ``PROMETHEUS_MULTIPROC_DIR``
(``./run serve`` does when ``WEB_WORKERS`` > 1) so prometheus_client sums them across processes.

What lives in a shared store (version builds and source runs in the database, the Celery queue in
the broker) is read when ``/metrics`` is scraped (:class:`StateGauge`), not kept by any process: the
Celery workers that build versions and sync sources are not scraped, and a process's copy would go
stale. Domain apps give each state gauge its reader; this module imports none of them.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from celery import current_app
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django_prometheus.exports import ExportToDjangoView
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from core import redis
from core.errors import error_body
from core.logging import tenant_of
from core.usage import ServedQuery, count_query

logger = logging.getLogger(__name__)

# URL names of the search endpoints (retrieval/urls.py): their 200s are queries served.
SEARCH_ENDPOINTS = frozenset(
    {"retrieval-vector", "retrieval-bm25", "retrieval-hybrid", "retrieval-graph", "retrieval-search"}
)
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
SEMANTIC_CACHE_REQUESTS = Counter(
    "retrieval_semantic_cache_requests",
    "Semantic cache lookups (exact misses of KBs that turn it on), by result (hit or miss).",
    ["result"],
)
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
SEARCH_CACHE_WRITES_DROPPED = Counter(
    "retrieval_search_cache_writes_dropped",
    "Computed answers not stored in the result cache, by reason (full: the writer's queue was full; failed: "
    "Redis refused or was unreachable).",
    ["reason"],
)
SEARCH_LOG_DROPPED = Counter(
    "retrieval_search_log_dropped",
    "Searches left out of the search analytics, by reason (full: the writer's queue was full; failed: its insert failed).",
    ["reason"],
)
COST_UNITS = Counter(
    "retrieval_cost_units",
    "Units consumed by requests and ingestion, by kind (embedding_tokens, rerank_pairs, llm_expansion_tokens_in, cpu_ms, ...).",
    ["kind"],
)
COST_AMOUNT = Counter(
    "retrieval_cost_amount", "The consumed units priced by the COST_PRICE_* settings, by kind.", ["kind"]
)

INGEST_OUTCOMES = ("added", "unchanged", "replaced", "failed")

# Each process sets its own breakers' state; with PROMETHEUS_MULTIPROC_DIR the live workers' maximum:
# 1 while any worker skips the component.
CIRCUIT_OPEN = Gauge(
    "retrieval_circuit_breaker_open",
    "1 while a circuit breaker skips its component (redis, reranker), else 0.",
    ["breaker"],
    multiprocess_mode="livemax",
)
BREAKERS = ("redis", "reranker")
for breaker in BREAKERS:
    CIRCUIT_OPEN.labels(breaker).set(0)  # closed until one opens: a series from the start

# Gauges read from a shared store at each scrape, exported beside the process's own metrics.
STATE_REGISTRY = CollectorRegistry()
# The broker's answer bounds a scrape: Prometheus gives up on /metrics after 10 s by default.
BROKER_TIMEOUT_S = 2.0


class StateGauge:
    """A gauge whose values a reader takes from a shared store when ``/metrics`` is scraped.

    ``read_by`` names the reader (a domain app's, or the broker's below): it returns the value of each
    label tuple. A reader that raises (its store is down) exports no sample and is logged; the rest of
    the scrape still answers.
    """

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()):
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        self._reader: Callable[[], Mapping[tuple[str, ...], float]] | None = None
        STATE_REGISTRY.register(self)

    def read_by(self, reader: Callable[[], Mapping[tuple[str, ...], float]]) -> None:
        self._reader = reader

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labels)]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        try:
            values = self._reader() if self._reader is not None else {}
        except Exception as exc:  # a scrape every 15 s: one line each, no traceback
            logger.warning("could not read the metric %s: %s: %s", self.name, type(exc).__name__, exc)
            values = {}
        for labels, value in values.items():
            family.add_metric(list(labels), value)
        yield family


KB_VERSIONS = StateGauge(
    "retrieval_kb_versions",
    "Knowledge base versions by status (building, ready, active, retired, failed).",
    ["status"],
)
OLDEST_BUILD_AGE = StateGauge(
    "retrieval_version_build_oldest_age_seconds", "Age of the oldest version still building; 0 when none is."
)
SOURCE_SYNC_FAILURES = StateGauge(
    "retrieval_source_sync_consecutive_failures",
    "Syncs of a source that failed in a row since its last successful one.",
    ["knowledge_base", "source"],
)
CELERY_QUEUE_LENGTH = StateGauge(
    "retrieval_celery_queue_length", "Tasks waiting in a Celery queue of the broker.", ["queue"]
)


def record_search(timings_ms: dict[str, float], degraded: list[dict[str, Any]]) -> None:
    """Called once per search pipeline run (a cache hit runs no stage, so records nothing here)."""
    for stage, milliseconds in timings_ms.items():
        STAGE_LATENCY.labels(stage).observe(milliseconds / 1000)
    for degradation in degraded:
        DEGRADED.labels(degradation["stage"], degradation["cause"]).inc()
        if degradation["stage"] == "rerank":
            RERANK_FALLBACKS.labels(degradation["cause"]).inc()


def record_circuit(breaker: str, is_open: bool) -> None:
    CIRCUIT_OPEN.labels(breaker).set(int(is_open))


def celery_queue_lengths() -> dict[tuple[str, ...], float]:
    """Tasks waiting in each queue the Celery app sends to, as the broker counts them."""
    app = current_app
    queues = {app.conf.task_default_queue, *(queue.name for queue in app.conf.task_queues or ())}
    options = {"socket_timeout": BROKER_TIMEOUT_S, "socket_connect_timeout": BROKER_TIMEOUT_S, "max_retries": 0}
    with app.connection_for_read(connect_timeout=BROKER_TIMEOUT_S, transport_options=options) as connection:
        channel = connection.default_channel
        return {(name,): channel.queue_declare(name).message_count for name in sorted(queues)}


redis.on_circuit_change(lambda name, is_open: record_circuit("redis", is_open))
CELERY_QUEUE_LENGTH.read_by(celery_queue_lengths)


def record_cache(hit: bool) -> None:
    CACHE_REQUESTS.labels("hit" if hit else "miss").inc()


def record_semantic_cache(hit: bool) -> None:
    SEMANTIC_CACHE_REQUESTS.labels("hit" if hit else "miss").inc()


def record_search_log_dropped(reason: str, count: int = 1) -> None:
    SEARCH_LOG_DROPPED.labels(reason).inc(count)


def record_search_cache_write_dropped(reason: str, count: int = 1) -> None:
    SEARCH_CACHE_WRITES_DROPPED.labels(reason).inc(count)


def record_cost(by_kind: dict[str, tuple[float, float]]) -> None:
    """``by_kind``: kind -> (units, amount) of one request or task."""
    for kind, (units, amount) in by_kind.items():
        COST_UNITS.labels(kind).inc(units)
        if amount:
            COST_AMOUNT.labels(kind).inc(amount)


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
    response.content += generate_latest(STATE_REGISTRY)
    return response
