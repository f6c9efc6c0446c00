"""Prometheus metrics: who may read /metrics, and what requests, searches and ingestion record."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import resolve
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from redis import TimeoutError as RedisTimeoutError
from rest_framework.response import Response

from core import metrics, redis
from core.metrics import INGEST_OUTCOMES
from core.usage import query_counts, query_usage
from knowledge.models import KnowledgeBase
from tests.conftest import client_for, corrupt_keyword_index, database_url_of_this_run, scraped_metrics
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory

OUTSIDER = "203.0.113.7"
ROOT = Path(__file__).resolve().parents[2]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Reads a sample before and after a block: metrics are process-wide and other tests add to them."""

    def __init__(self, name: str, **labels: str):
        self.name, self.labels = name, labels
        self.before = sample(name, **labels)

    @property
    def value(self) -> float:
        return sample(self.name, **self.labels) - self.before


def cache_deltas() -> tuple[Delta, Delta]:
    return Delta("retrieval_cache_requests_total", result="hit"), Delta("retrieval_cache_requests_total", result="miss")


# === access to /metrics =============================================================================


def test_metrics_are_served_to_localhost_by_default(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert "django_http_requests_latency_seconds_by_view_method" in text  # django-prometheus
    assert "retrieval_request_latency_seconds" in text


def test_other_addresses_get_a_403_json_error(client):
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_X_REQUEST_ID="rid-metrics")
    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": "forbidden",
            "message": "Metrics are only served to allowed addresses or with the metrics token.",
            "request_id": "rid-metrics",
        }
    }


def test_ipv4_mapped_ipv6_peers_match_ipv4_entries(client):
    assert client.get("/metrics", REMOTE_ADDR="::ffff:127.0.0.1").status_code == 200


def test_x_forwarded_for_does_not_grant_access(client):
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert response.status_code == 403


def test_allowed_networks_in_cidr_notation(client, settings):
    settings.METRICS_ALLOWED_IPS = ["203.0.113.0/24", "2001:db8::/32"]
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDER).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="2001:db8::5").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


@pytest.mark.parametrize(
    ("token", "header", "status"),
    [
        ("s3cret-token", "Bearer s3cret-token", 200),
        ("s3cret-token", "bearer s3cret-token", 200),
        ("s3cret-token", "Bearer wrong", 403),
        ("s3cret-token", "Basic s3cret-token", 403),
        ("", "Bearer ", 403),  # no token configured: a bearer header grants nothing
    ],
)
def test_the_metrics_token_grants_access_from_anywhere(client, settings, token, header, status):
    settings.METRICS_TOKEN = token
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_AUTHORIZATION=header)
    assert response.status_code == status


# === request metrics ================================================================================


@pytest.mark.django_db
def test_search_requests_are_timed_by_endpoint_and_mode(tenant):
    client = client_for(tenant)
    search = Delta("retrieval_request_latency_seconds_count", endpoint="retrieval-search", mode="bm25")
    error = Delta("retrieval_request_latency_seconds_count", endpoint="retrieval-search", mode="")
    assert client.post("/api/v1/retrieval/search", {"query": "x", "mode": "bm25"}, format="json").status_code == 200
    assert client.post("/api/v1/retrieval/search", {"query": ""}, format="json").status_code == 400
    assert (search.value, error.value) == (1, 1)


@pytest.mark.django_db
def test_a_rerun_search_records_every_stage_and_a_cache_hit_records_none(tenant, embedder):
    kb = KnowledgeBaseFactory(tenant=tenant)
    ChunkFactory.create_batch(2, document=DocumentFactory(knowledge_base=kb))
    stages = ("expand", "embed", "vector", "bm25", "fuse", "total")
    deltas = {stage: Delta("retrieval_search_stage_seconds_count", stage=stage) for stage in stages}
    hits, misses = cache_deltas()
    client = client_for(tenant)
    first, second = (client.post("/api/v1/retrieval/hybrid", {"query": "x"}, format="json").json() for _ in range(2))

    assert {stage: delta.value for stage, delta in deltas.items()} == dict.fromkeys(stages, 1)
    assert (first["cached"], second["cached"]) == (False, True)
    assert (misses.value, hits.value) == (1, 1)


def test_stage_timings_are_observed_in_seconds():
    delta = Delta("retrieval_search_stage_seconds_sum", stage="rerank")
    metrics.record_search({"rerank": 250.0}, [])
    assert delta.value == pytest.approx(0.25)


def test_degradations_are_counted_by_stage_and_cause_and_rerank_fallbacks_apart():
    bm25 = Delta("retrieval_search_degraded_total", stage="bm25", cause="timeout")
    rerank = Delta("retrieval_search_degraded_total", stage="rerank", cause="circuit_open")
    fallback = Delta("retrieval_rerank_fallbacks_total", cause="circuit_open")
    metrics.record_search(
        {},
        [
            {"stage": "bm25", "cause": "timeout", "message": "..."},
            {"stage": "rerank", "cause": "circuit_open", "message": "..."},
        ],
    )
    assert (bm25.value, rerank.value, fallback.value) == (1, 1, 1)


@pytest.mark.django_db
def test_a_degraded_search_through_the_api_is_counted(tmp_path: Path, tenant, embedder, settings):
    (tmp_path / "kettle.txt").write_text("The kettle switches itself off when the water boils.")
    call_command("ingest", str(tmp_path), tenant=tenant.name, kb="kb", no_progress=True, stdout=io.StringIO())
    version_id = KnowledgeBase.objects.get(tenant=tenant, name="kb").active_version_id
    corrupt_keyword_index(settings.LEXICAL_INDEX_DIR, version_id)
    degraded = Delta("retrieval_search_degraded_total", stage="bm25", cause="unreadable_index")
    fallback = Delta("retrieval_rerank_fallbacks_total", cause="not_configured")
    body = {"query": "kettle", "rerank": True}
    response = client_for(tenant).post("/api/v1/retrieval/hybrid", body, format="json")
    assert response.status_code == 200, response.content
    assert (degraded.value, fallback.value) == (1, 1)


def middleware_response(path: str, response: HttpResponse) -> HttpResponse:
    request = RequestFactory().post(path)
    request.resolver_match = resolve(path)
    return metrics.MetricsMiddleware(lambda _: response)(request)


def test_429_responses_are_counted_by_endpoint():
    delta = Delta("retrieval_rate_limited_requests_total", endpoint="retrieval-vector")
    middleware_response("/api/v1/retrieval/vector", HttpResponse(status=429))
    assert delta.value == 1


def test_record_functions_for_callers_outside_a_request():
    hit, _ = cache_deltas()
    limited = Delta("retrieval_rate_limited_requests_total", endpoint="bm25")
    metrics.record_cache(True)
    metrics.record_rate_limited("bm25")
    assert (hit.value, limited.value) == (1, 1)


@pytest.mark.django_db  # closing a response sends request_finished, which closes old DB connections
def test_a_served_search_is_counted_for_its_tenant_once_its_response_is_closed():
    """The dashboard's counters are written after the answer went out (WSGI servers close a response
    once it is sent), not while the client waits."""
    request = RequestFactory().post("/api/v1/retrieval/bm25")
    request.resolver_match = resolve("/api/v1/retrieval/bm25")
    request.auth = SimpleNamespace(tenant=SimpleNamespace(pk=987_654))
    body = {"mode": "bm25", "cached": False, "latency_ms": 4.2, "total": 0, "queries": [{"text": "kettle"}]}
    response = metrics.MetricsMiddleware(lambda _: Response(body))(request)
    assert query_counts(987_654)["served"] == 0
    response.close()
    assert query_counts(987_654)["served"] == 1
    assert query_usage(987_654)["no_result_queries"] == [("kettle", 1)]


def test_responses_without_a_cached_flag_count_no_cache_lookup():
    hits, misses = cache_deltas()
    middleware_response("/api/v1/retrieval/bm25", Response({"mode": "bm25"}))
    assert (hits.value, misses.value) == (0, 0)


# === ingestion ======================================================================================


@pytest.mark.django_db
def test_ingestion_counts_documents_by_outcome_and_chunks(tmp_path: Path, tenant, embedder):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("Refunds are paid within five working days.")
    (folder / "b.md").write_text("# Kettle\n\nThe kettle switches itself off when the water boils.")
    (folder / "broken.pdf").write_bytes(b"not a pdf")
    deltas = {outcome: Delta("retrieval_ingest_documents_total", outcome=outcome) for outcome in INGEST_OUTCOMES}
    chunks = Delta("retrieval_ingest_chunks_total")

    def run():
        call_command("ingest", str(folder), tenant=tenant.name, kb="kb", no_progress=True, stdout=io.StringIO())

    run()
    (folder / "a.txt").write_text("Refunds are paid within three working days.")
    run()
    assert {outcome: delta.value for outcome, delta in deltas.items()} == {
        "added": 2, "replaced": 1, "unchanged": 1, "failed": 2,
    }  # fmt: skip
    assert chunks.value == 3


# === circuit breakers and state read at each scrape ================================================


def test_the_redis_circuit_gauge_follows_the_breaker_opening_and_closing():
    breaker = redis.RedisBreaker("metrics-test", failures=1, window_s=60, cooldown_s=0.05)

    def command(error: Exception | None):
        def call():
            if error is not None:
                raise error
            return "PONG"

        return call

    with pytest.raises(RedisTimeoutError):
        breaker.call(command(RedisTimeoutError("Timeout reading from socket")))
    assert sample("retrieval_circuit_breaker_open", breaker="redis") == 1
    time.sleep(0.1)  # the cool-down: the next call probes Redis
    assert breaker.call(command(None)) == "PONG"
    assert sample("retrieval_circuit_breaker_open", breaker="redis") == 0


@pytest.fixture
def state_gauge():
    gauge = metrics.StateGauge("retrieval_test_state", "A state gauge of this test.", ["part"])
    yield gauge
    metrics.STATE_REGISTRY.unregister(gauge)


def test_state_gauges_are_read_at_each_scrape(client, state_gauge):
    values = {("a",): 1.0}
    state_gauge.read_by(lambda: values)
    assert scraped_metrics(client)["retrieval_test_state"] == {frozenset({("part", "a")}): 1.0}
    values[("b",)] = 2.0
    assert scraped_metrics(client)["retrieval_test_state"] == {
        frozenset({("part", "a")}): 1.0, frozenset({("part", "b")}): 2.0,
    }  # fmt: skip


def test_a_reader_that_fails_exports_nothing_and_the_scrape_still_answers(client, state_gauge, caplog):
    def unreachable():
        raise ConnectionError("the store is down")

    state_gauge.read_by(unreachable)
    samples = scraped_metrics(client)
    assert "retrieval_test_state" not in samples
    assert "retrieval_request_latency_seconds_count" in samples
    assert any("retrieval_test_state" in record.getMessage() for record in caplog.records)


def test_the_celery_queue_length_counts_the_tasks_waiting_in_the_broker(client, celery_app):
    before = scraped_metrics(client)["retrieval_celery_queue_length"][frozenset({("queue", "celery")})]
    try:
        for _ in range(2):
            celery_app.send_task("tests.no_such_task")  # no worker runs: they wait
        after = scraped_metrics(client)["retrieval_celery_queue_length"][frozenset({("queue", "celery")})]
    finally:
        celery_app.control.purge()
    assert after == before + 2


def test_an_unreachable_broker_leaves_its_gauge_out_of_the_scrape(client, celery_app):
    broker_url = celery_app.conf.broker_url
    with socket.socket() as closed:  # a port that was free a moment ago: nothing listens on it
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    celery_app.conf.broker_url = f"redis://127.0.0.1:{port}/0"
    try:
        samples = scraped_metrics(client)
    finally:
        celery_app.conf.broker_url = broker_url
    assert "retrieval_celery_queue_length" not in samples
    assert "retrieval_request_latency_seconds_count" in samples


SCRAPE = (
    "import django; django.setup(); from django.test import Client; print(Client().get('/metrics').content.decode())"
)


@pytest.mark.django_db(transaction=True)  # the scraping process reads committed rows
def test_with_several_workers_the_scrape_holds_the_breakers_and_the_state_read_at_scrape(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR (compose, ``WEB_WORKERS`` > 1) /metrics reads the workers' files:
    the breakers' gauges are there, and the state gauges are appended to them."""
    environment = {**os.environ, "DATABASE_URL": database_url_of_this_run(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", SCRAPE], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(result.stdout)
        for sample in family.samples
    }
    assert samples[("retrieval_circuit_breaker_open", frozenset({("breaker", "redis")}))] == 0
    assert ("retrieval_kb_versions", frozenset({("status", "failed")})) in samples
    assert ("retrieval_celery_queue_length", frozenset({("queue", "celery")})) in samples
    assert ("retrieval_version_build_oldest_age_seconds", frozenset()) in samples
