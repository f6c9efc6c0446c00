"""CORS: only configured origins, only under /api/, with the headers our clients send and read."""

from __future__ import annotations

import pytest

URL = "/api/v1/retrieval/bm25"
ORIGIN = "https://app.example.com"
REQUEST_HEADERS = ["authorization", "x-api-key", "idempotency-key", "x-request-id", "content-type"]


@pytest.fixture
def allowed_origin(settings) -> str:
    settings.CORS_ALLOWED_ORIGINS = [ORIGIN]
    return ORIGIN


def preflight(client, origin: str, path: str = URL):
    return client.options(
        path,
        HTTP_ORIGIN=origin,
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS=", ".join(REQUEST_HEADERS),
    )


def test_preflight_from_an_allowed_origin_allows_our_request_headers(client, allowed_origin):
    response = preflight(client, allowed_origin)
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == allowed_origin
    allowed = {header.strip() for header in response["Access-Control-Allow-Headers"].split(",")}
    assert set(REQUEST_HEADERS) <= allowed
    assert "POST" in response["Access-Control-Allow-Methods"]


@pytest.mark.django_db
def test_responses_expose_request_id_rate_limit_and_idempotency_headers(client, allowed_origin):
    response = client.post(URL, {"query": "x"}, content_type="application/json", HTTP_ORIGIN=allowed_origin)
    assert response.status_code == 401
    assert response["Access-Control-Allow-Origin"] == allowed_origin
    exposed = {header.strip().lower() for header in response["Access-Control-Expose-Headers"].split(",")}
    assert {"x-request-id", "retry-after", "idempotent-replayed", "x-ratelimit-limit", "x-ratelimit-remaining",
            "x-ratelimit-reset"} <= exposed  # fmt: skip


@pytest.mark.django_db
def test_an_unlisted_origin_gets_no_cors_headers(client, allowed_origin):
    response = preflight(client, "https://evil.example.net")
    assert "Access-Control-Allow-Origin" not in response


def test_no_origin_is_allowed_by_default(client, settings):
    assert settings.CORS_ALLOWED_ORIGINS == []
    assert "Access-Control-Allow-Origin" not in preflight(client, ORIGIN)


def test_cors_applies_only_to_the_api(client, allowed_origin):
    response = client.get("/health", HTTP_ORIGIN=allowed_origin)
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response
