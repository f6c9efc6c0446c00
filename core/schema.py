"""OpenAPI pieces every endpoint shares (drf-spectacular): the error shape with an example per code,
and the API-key security schemes. Extensions register on import: ``CoreConfig.ready`` imports this.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from core.idempotency import IDEMPOTENCY_KEY_PATTERN
from engines.metering import KINDS


class ErrorDetailOutput(serializers.Serializer[Any]):
    code = serializers.CharField(help_text="machine-readable, e.g. invalid_filter")
    message = serializers.CharField(help_text="human-readable; names the offending field or value")
    request_id = serializers.CharField(help_text="the X-Request-ID of the response")
    details = serializers.DictField(required=False, help_text="per-field messages of a 400 invalid_request")


class ErrorOutput(serializers.Serializer[Any]):
    error = ErrorDetailOutput()


# status -> (description, [(code, message)]): one example per code a client can receive.
ERRORS: dict[int, tuple[str, list[tuple[str, str]]]] = {
    400: (
        (
            "Invalid body, filter, JSON, paging value or query string, or a query vector the searched knowledge "
            "bases cannot use."
        ),
        [
            ("invalid_request", "top_k: Ensure this value is less than or equal to 100."),
            ("invalid_filter", "unknown filter field 'colour'"),
            ("malformed_json", "JSON parse error - Expecting value: line 1 column 1 (char 0)"),
            ("invalid_idempotency_key", "Idempotency-Key must be 1-255 characters of letters, digits and . _ : -"),
            ("query_vector_mismatch", "query_vector has 768 dimensions; model 'all-MiniLM-L6-v2' makes 384"),
            ("query_vector_not_applicable", "query_vector needs a dense leg; mode bm25 has none"),
            ("unsupported_charset", "Content-Type names charset 'bogus-enc', which is no known encoding: send UTF-8"),
            ("malformed_query_string", "The query string is not UTF-8 once percent-decoded."),
        ],
    ),
    401: (
        "No API key (the response carries `WWW-Authenticate: Bearer`).",
        [("missing_api_key", "Authentication credentials were not provided.")],
    ),
    403: (
        "Unknown, expired or revoked API key, a malformed `Authorization` header, or a key without the scope.",
        [
            ("invalid_api_key", "The API key is invalid, expired or revoked."),
            ("insufficient_scope", "This API key lacks the 'search' scope."),
        ],
    ),
    404: (
        (
            "A knowledge base the tenant does not have; on the knowledge API also one of its documents, versions or "
            "sources, or a task (each with its own code); an unknown `?format=`."
        ),
        [
            ("knowledge_base_not_found", "knowledge base(s) 999 not found"),
            ("document_not_found", "knowledge base 2 has no document 33"),
            ("version_not_found", "knowledge base 2 has no version 9"),
            ("source_not_found", "knowledge base 2 has no source 5"),
            ("task_not_found", "unknown task id: 00000000-0000-0000-0000-000000000000"),
            ("evaluation_run_not_found", "unknown evaluation run id: 12"),
            ("not_found", "Not found."),
        ],
    ),
    409: (
        "A request with the same `Idempotency-Key` is still running; retry shortly.",
        [("idempotency_in_flight", "A request with this Idempotency-Key is still in progress; retry shortly.")],
    ),
    413: (
        "The body is larger than `MAX_REQUEST_BYTES`.",
        [("payload_too_large", "The request body is larger than the allowed maximum.")],
    ),
    415: (
        "The body is not `application/json`.",
        [("unsupported_media_type", 'Unsupported media type "text/plain" in request.')],
    ),
    422: (
        "The `Idempotency-Key` was already used for a different request.",
        [("idempotency_key_reused", "This Idempotency-Key was already used for a different request.")],
    ),
    429: (
        "Too many requests for the key's rate tier; retry after `Retry-After` seconds.",
        [("rate_limited", "Rate limit of 60 hybrid requests per 60 s exceeded.")],
    ),
    503: (
        "A backend the request cannot do without is down (a hybrid search degrades instead).",
        [
            ("embedder_unavailable", "cannot embed the query: the embedding service did not answer"),
            ("lexical_index_unavailable", "keyword search is unavailable: cannot reach Elasticsearch"),
            (
                "vector_index_unavailable",
                "vector search is unavailable: unexpected OperationalError; details are in the service log",
            ),
            (
                "graph_unavailable",
                "graph search is unavailable: unexpected OperationalError; details are in the service log",
            ),
            ("reranker_unavailable", "reranking is unavailable: the reranker answered HTTP 500"),
            ("rate_limiter_unavailable", "Rate limiting is unavailable; retry shortly."),
        ],
    ),
}
REQUEST_ID = "8f0c1b2e3d4a45b6a7c8d9e0f1a2b3c4"
# Every POST of the API takes it (core.idempotency.IdempotentPostMixin).
IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    pattern=IDEMPOTENCY_KEY_PATTERN,
    description="Makes a retry safe: the same key and body within `IDEMPOTENCY_TTL_S` (a day) replays the "
    "first response, with `Idempotent-Replayed: true`. The same key with a different body or endpoint is a "
    "422 `idempotency_key_reused`; while the first request still runs, a 409. A key is 1-255 of "
    "`A-Z a-z 0-9 . _ : -`.",
)
EXAMPLE_TOKEN_PRICE = 0.00000002  # the examples' COST_PRICE_EMBEDDING_TOKEN, in USD


def cost_example(**units: float) -> dict[str, Any]:
    """A ``cost`` object (``core.cost.priced``) of the examples: these units, only embedding tokens priced."""
    amount = round(units.get("embedding_tokens", 0) * EXAMPLE_TOKEN_PRICE, 9)
    return {
        "units": {kind: units.get(kind, 0) for kind in KINDS},
        "amount": amount,
        "amounts": {"embedding_tokens": amount} if amount else {},
        "currency": "USD",
    }


# GET /api/v1/stats's cost (core.cost.tenant_costs).
STATS_COST_EXAMPLE = {
    "days": 30,
    "daily": [
        {"date": "2026-12-01", **cost_example(embedding_tokens=182_000, embedding_calls=96, cpu_ms=41_250.5)},
        {"date": "2026-12-02", **cost_example(embedding_tokens=2_400, embedding_calls=310, cpu_ms=3_120.25)},
    ],
    "total": cost_example(embedding_tokens=184_400, embedding_calls=406, cpu_ms=44_370.75),
}


BEARER_SCHEME = {"type": "http", "scheme": "bearer", "description": "An API key from `manage.py create_api_key`."}


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """The one error shape, ``{"error": {code, message, request_id}}``, with an example per code."""
    responses = {}
    for status in statuses:
        description, codes = ERRORS[status]
        examples = [
            OpenApiExample(
                f"{status} {code}",
                value={"error": {"code": code, "message": message, "request_id": REQUEST_ID}},
                response_only=True,
                status_codes=[str(status)],
            )
            for code, message in codes
        ]
        responses[status] = OpenApiResponse(response=ErrorOutput, description=description, examples=examples)
    return responses


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer <key>`` or ``X-API-Key: <key>``; either one authenticates."""

    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = ["BearerApiKey", "ApiKeyHeader"]

    def get_security_requirement(self, auto_schema: AutoSchema) -> list[dict[str, list[Any]]]:
        return [{"BearerApiKey": []}, {"ApiKeyHeader": []}]

    def get_security_definition(self, auto_schema: AutoSchema) -> list[dict[str, Any]]:
        return [
            BEARER_SCHEME,
            {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "The same key, in its own header."},
        ]
