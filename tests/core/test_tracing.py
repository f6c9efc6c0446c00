"""OpenTelemetry (core.tracing): a server span per request that honours ``traceparent``, child spans from
``span()``, trace ids in the JSON logs, OTLP export over a real socket, and nothing at all when off."""

from __future__ import annotations

import io
import json
import logging
import logging.config

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import MiddlewareNotUsed
from django.http import HttpResponse
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from core import tracing
from core.logging import RequestIdFilter
from tests.conftest import client_for
from tests.peers import Peer, Reply

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def only(finished, name: str):
    matching = [span for span in finished if span.name == name]
    assert len(matching) == 1, [span.name for span in finished]
    return matching[0]


def test_tracing_is_off_by_default_and_costs_nothing():
    assert not tracing.tracing_enabled()
    assert tracing.span("expand") is tracing.span("embed", model="m")  # one shared no-op
    with tracing.span("expand"):
        pass
    with pytest.raises(MiddlewareNotUsed):
        tracing.TracingMiddleware(lambda request: None)
    middleware = django_settings.MIDDLEWARE
    position = middleware.index("core.tracing.TracingMiddleware")
    assert position == middleware.index("core.request_id.RequestIdMiddleware") + 1


def test_each_request_is_a_server_span(client, spans):
    response = client.get("/health")
    server = only(spans.get_finished_spans(), "GET /health")
    assert server.kind == SpanKind.SERVER and server.parent is None
    assert server.attributes["http.route"] == "/health"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["http.request_id"] == response["X-Request-ID"]
    missing = client.get("/api/v1/nothing-here")
    assert missing.status_code == 404
    unmatched = [span for span in spans.get_finished_spans() if span is not server]
    assert [(span.name, span.attributes["url.path"]) for span in unmatched] == [("GET", "/api/v1/nothing-here")]


def test_an_incoming_traceparent_is_honoured(client, spans):
    client.get("/health", HTTP_TRACEPARENT=f"00-{TRACE_ID}-{PARENT_ID}-01")
    client.get("/health", HTTP_TRACEPARENT="00-not-a-trace-01")
    continued, fresh = spans.get_finished_spans()
    assert format(continued.context.trace_id, "032x") == TRACE_ID
    assert format(continued.parent.span_id, "016x") == PARENT_ID and continued.parent.is_remote
    assert fresh.parent is None and format(fresh.context.trace_id, "032x") != TRACE_ID


@pytest.mark.slow
@pytest.mark.django_db
def test_every_search_stage_is_a_child_span_also_in_the_embedding_thread(sample_kb, spans, settings):
    settings.SEARCH_CACHE_TTL_S = 0
    response = client_for(sample_kb.tenant).post(
        "/api/v1/retrieval/hybrid", {"query": "How should I store the battery pack?"}, format="json"
    )
    assert response.status_code == 200, response.content
    finished = spans.get_finished_spans()
    server, total = only(finished, "POST /api/v1/retrieval/hybrid"), only(finished, "search.total")
    assert total.parent.span_id == server.context.span_id
    stages = {name for name in response.json()["timings_ms"] if name != "total"}
    assert {"expand", "embed", "bm25", "vector", "fuse"} <= stages
    for stage in stages:  # the embedding ran in another thread, in a copy of the request's context
        assert all(span.parent.span_id == total.context.span_id for span in finished if span.name == f"search.{stage}")
    assert {span.context.trace_id for span in finished} == {server.context.trace_id}


def test_a_server_error_marks_the_span(rf, spans):
    middleware = tracing.TracingMiddleware(lambda request: HttpResponse(status=503))
    assert middleware(rf.get("/ready")).status_code == 503
    failed = only(spans.get_finished_spans(), "GET")
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["http.response.status_code"] == 503


def test_log_lines_carry_the_trace_and_span_ids_beside_the_request_id(client, spans):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    configurator = logging.config.DictConfigurator(django_settings.LOGGING)
    handler.setFormatter(configurator.configure_formatter(dict(django_settings.LOGGING["formatters"]["json"])))
    handler.addFilter(RequestIdFilter())
    handler.addFilter(tracing.TraceContextFilter())
    logging.getLogger().addHandler(handler)
    try:
        response = client.get("/health")
        logging.getLogger("outside").warning("no request")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    access = next(line for line in lines if line["logger"] == "retrieval.access")
    server = only(spans.get_finished_spans(), "GET /health")
    assert access["request_id"] == response["X-Request-ID"]
    assert access["trace_id"] == format(server.context.trace_id, "032x")
    assert access["span_id"] == format(server.context.span_id, "016x")
    outside = next(line for line in lines if line["logger"] == "outside")
    assert (outside["trace_id"], outside["span_id"], outside["request_id"]) == ("-", "-", "-")


def test_spans_are_exported_over_otlp_http(client, settings):
    with Peer(lambda request: Reply(200, b"")) as collector:
        settings.OTEL_EXPORTER_OTLP_ENDPOINT = collector.url + "/"
        settings.OTEL_TRACES_EXPORTER = ""
        tracing.configure_tracing()
        try:
            client.get("/health")
            tracing.flush_tracing()
        finally:
            tracing.shutdown_tracing()
    exported = [request for request in collector.requests if request.path == "/v1/traces"]
    assert exported and exported[0].method == "POST"
    assert exported[0].headers["content-type"] == "application/x-protobuf"
    assert b"retrieval-service" in exported[0].body and b"GET /health" in exported[0].body


@pytest.mark.parametrize(
    ("endpoint", "exporter", "expected"),
    [
        ("", "", None),
        ("", "none", None),
        ("http://collector:4318", "none", None),
        ("", "console", ConsoleSpanExporter),
    ],
)
def test_the_settings_choose_the_exporter(settings, endpoint, exporter, expected):
    settings.OTEL_EXPORTER_OTLP_ENDPOINT, settings.OTEL_TRACES_EXPORTER = endpoint, exporter
    chosen = tracing.exporter_from_settings()
    assert chosen is None if expected is None else isinstance(chosen, expected)
