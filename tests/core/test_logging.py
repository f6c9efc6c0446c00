"""Structured logs: every line carries the request id (also lines from the embedding thread), and
each request gets one ``retrieval.access`` line with route, method, status, latency and tenant."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings

from core.logging import RequestIdFilter
from tests.conftest import client_for
from tests.factories import DIMENSION, KnowledgeBaseFactory
from tests.peers import Peer, PeerRequest, Reply


def attach_handler(formatter_name: str) -> tuple[logging.Handler, io.StringIO]:
    """A handler built like the configured console handler (same formatter and filter), into a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    configurator = logging.config.DictConfigurator(settings.LOGGING)
    handler.setFormatter(configurator.configure_formatter(dict(settings.LOGGING["formatters"][formatter_name])))
    handler.addFilter(RequestIdFilter())
    logging.getLogger().addHandler(handler)
    return handler, stream


@pytest.fixture
def json_lines() -> Iterator[Callable[[], list[dict]]]:
    handler, stream = attach_handler("json")
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logging.getLogger().removeHandler(handler)


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    handler, stream = attach_handler("text")
    yield stream
    logging.getLogger().removeHandler(handler)


def access_lines(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["logger"] == "retrieval.access"]


def test_json_is_the_default_format():
    assert settings.LOG_FORMAT == "json"
    assert settings.LOGGING["handlers"]["console"]["formatter"] == "json"
    assert settings.LOGGING["handlers"]["console"]["filters"] == ["request_id"]


@pytest.mark.django_db
def test_an_authenticated_request_gets_one_access_line(json_lines, tenant):
    response = client_for(tenant).post(
        "/api/v1/retrieval/bm25", {"query": "hello"}, format="json", HTTP_X_REQUEST_ID="rid-access"
    )
    assert response.status_code == 200
    [line] = access_lines(json_lines())
    assert line["request_id"] == "rid-access"
    assert line["route"] == "retrieval-bm25"
    assert (line["method"], line["path"], line["status"]) == ("POST", "/api/v1/retrieval/bm25", 200)
    assert (line["tenant"], line["tenant_id"]) == (tenant.name, tenant.pk)
    assert isinstance(line["latency_ms"], float) and line["latency_ms"] >= 0
    assert line["level"] == "INFO" and line["timestamp"]


@pytest.mark.django_db
def test_an_anonymous_request_logs_no_tenant(json_lines, client):
    response = client.post("/api/v1/retrieval/vector", {"query": "x"}, content_type="application/json")
    assert response.status_code == 401
    [line] = access_lines(json_lines())
    assert (line["status"], line["tenant"], line["tenant_id"]) == (401, None, None)
    assert line["request_id"] == response["X-Request-ID"]


def test_an_unmatched_path_has_no_route_and_other_loggers_carry_the_request_id(json_lines, client):
    response = client.get("/api/v1/nowhere", HTTP_X_REQUEST_ID="rid-404")
    assert response.status_code == 404
    lines = json_lines()
    [access] = access_lines(lines)
    assert (access["route"], access["status"]) == (None, 404)
    not_found = [line for line in lines if line["logger"] == "django.request"]
    assert not_found and all(line["request_id"] == "rid-404" for line in not_found)


@pytest.mark.django_db
def test_lines_logged_by_the_embedding_thread_carry_the_request_id(json_lines, tenant, settings):
    """The query embeds in a pool thread, which runs in a copy of the request's context. The
    embedder here is remote: its HTTP client logs each call, from that thread."""

    def embeddings(request: PeerRequest) -> Reply:
        vector = [1.0] + [0.0] * (DIMENSION - 1)
        return Reply(body={"data": [{"index": i, "embedding": vector} for i in range(len(request.json()["input"]))]})

    with Peer(embeddings) as peer:
        settings.EMBEDDING_URL = peer.url
        # A model name of this test's own: its embedder loads (and probes the peer) in the thread too.
        KnowledgeBaseFactory(tenant=tenant, embedding_model=f"remote:logging-{uuid.uuid4().hex}")
        response = client_for(tenant).post(
            "/api/v1/retrieval/vector", {"query": "hello"}, format="json", HTTP_X_REQUEST_ID="rid-thread"
        )
    assert response.status_code == 200, response.content
    calls = [line for line in json_lines() if line["logger"] == "httpx"]
    assert len(calls) == 2  # the dimension probe and the query
    assert all(line["request_id"] == "rid-thread" for line in calls)


def test_outside_a_request_the_request_id_is_a_dash(json_lines):
    logging.getLogger("tests.outside").warning("no request here")
    [line] = json_lines()
    assert line["request_id"] == "-"
    assert line["message"] == "no request here" and line["level"] == "WARNING"


def test_extra_fields_become_json_keys(json_lines):
    logging.getLogger("tests.extra").warning("search degraded", extra={"stage": "bm25", "cause": "timeout"})
    [line] = json_lines()
    assert (line["stage"], line["cause"]) == ("bm25", "timeout")


def test_text_format_shows_the_request_id(text_log, client):
    client.get("/health", HTTP_X_REQUEST_ID="rid-text")
    assert "[rid-text] GET /health 200" in text_log.getvalue()
