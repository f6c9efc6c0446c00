"""Every API endpoint of the URL conf, found by walking it: each declares and enforces a scope and a rate limit,
and arbitrary JSON never gets a 5xx or a non-JSON answer."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.ratelimit import RateLimitedMixin
from retrieval.dify import DifyRetrievalView
from tenants.models import Scope
from tenants.permissions import HasScope
from tenants.services import create_api_key
from tests.factories import TenantFactory
from tests.retrieval.api_corpus import ingest, write_files

# Public by design: the OpenAPI document and its Swagger UI (health, ready and metrics live outside /api/).
PUBLIC_API_ROUTES = {"api/schema/", "api/docs/"}


def api_routes() -> list[tuple[str, type, str]]:
    """``(path, view class, method)`` of every route and method under ``/api/`` and ``/v1/`` (OpenAI's), walking
    includes; a path's regex groups (``(?P<kb_id>...)``) and converters (``<str:id>``) become ``1``: scopes and limits apply before any lookup."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + re.sub(r"\(\?P<\w+>[^)]*\)|<\w+:\w+>", "1", str(pattern.pattern)).strip("^$")
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith(("api/", "v1/")):
                callback = pattern.callback
                view_class = getattr(callback, "view_class", None) or callback.cls
                if hasattr(callback, "actions"):  # a viewset: its router's methods on this route
                    methods = set(callback.actions)
                else:
                    methods = {method for method in view_class.http_method_names if hasattr(view_class, method)}
                found.extend((route, view_class, method.upper()) for method in sorted(methods - {"options", "head"}))

    walk(get_resolver().url_patterns, "")
    return found


def test_the_walk_finds_every_api_endpoint():
    routes = {route for route, _, _ in api_routes()}
    expected = {f"api/v1/retrieval/{mode}" for mode in ("vector", "bm25", "hybrid", "graph", "search")}
    expected |= {
        "api/v1/stats",
        "api/v1/dify/retrieval",
        "api/v1/dify//retrieval",
        "api/v1/knowledge-bases",
        "api/v1/knowledge-bases/1",
    }
    expected |= {"api/v1/knowledge-bases/1/documents", "api/v1/knowledge-bases/1/documents/1"}
    expected |= {"api/v1/documents/1/text", "api/v1/knowledge-bases/1/documents/1/chunks"}
    expected |= {"api/v1/knowledge-bases/1/documents/1/chunks/1"}
    expected |= {"api/v1/knowledge-bases/1/versions", "api/v1/knowledge-bases/1/versions/1/activate", "api/v1/tasks/1"}
    expected |= {"api/v1/knowledge-bases/1/versions/1/retire"}
    expected |= {f"api/v1/knowledge-bases/1/sources{tail}" for tail in ("", "/1", "/1/sync")}
    expected |= {"v1/vector_stores", "v1/vector_stores/1", "v1/vector_stores/1/search"}
    expected |= {f"api/v1/knowledge-bases/1/query-set{tail}" for tail in ("", "/judgments", "/import")}
    expected |= {f"api/v1/knowledge-bases/1/evaluations{tail}" for tail in ("", "/1", "/1/threshold")}
    expected |= {"api/v1/knowledge-bases/1/versions/1/gate"}
    assert expected | PUBLIC_API_ROUTES == routes


def accepted_scopes(view_class: type, method: str) -> list[str]:
    if hasattr(view_class, "scopes_for"):
        return view_class.scopes_for(view_class(), SimpleNamespace(method=method))
    return [view_class.required_scope]


API_ROUTES = [endpoint for endpoint in api_routes() if endpoint[0] not in PUBLIC_API_ROUTES]


@pytest.mark.parametrize(("route", "view_class", "method"), API_ROUTES)
def test_every_api_endpoint_declares_a_scope_and_a_rate_limit(route, view_class, method):
    assert HasScope in view_class.permission_classes, f"{route}: no HasScope permission"
    scopes = accepted_scopes(view_class, method)
    assert scopes and set(scopes) <= set(Scope.values), f"{route}: {method} names no scope"
    assert issubclass(view_class, RateLimitedMixin), f"{route}: not rate limited"
    assert view_class.rate_limit_endpoint is not RateLimitedMixin.rate_limit_endpoint, f"{route}: no limit counter"


def call(route: str, method: str, client: Client):
    return client.generic(method, f"/{route}", data=b'{"query": "x"}', content_type="application/json")


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "view_class", "method"), API_ROUTES)
def test_every_api_endpoint_enforces_its_scope_and_counts_calls(route, view_class, method):
    tenant = TenantFactory()
    scopes = accepted_scopes(view_class, method)
    other_scopes = [scope for scope in Scope.values if scope not in scopes]
    wrong_key = create_api_key(tenant=tenant, scopes=other_scopes).raw_key
    refused = call(route, method, Client(HTTP_AUTHORIZATION=f"Bearer {wrong_key}"))
    assert refused.status_code == 403, refused.content
    assert int(refused["X-RateLimit-Remaining"]) < int(refused["X-RateLimit-Limit"])
    anonymous = call(route, method, Client())
    assert "X-RateLimit-Limit" in anonymous, anonymous.content
    if view_class is DifyRetrievalView:  # Dify's codes: 1002 failed authorization, 1001 no usable header
        assert refused.json()["error_code"] == 1002
        assert (anonymous.status_code, anonymous.json()["error_code"]) == (403, 1001)
        return
    assert refused.json()["error"]["details"] == {"required_scope": scopes[0]}
    assert anonymous.status_code == 401, anonymous.content


# --- arbitrary JSON -----------------------------------------------------------------------------------

ODD_DATES = [
    "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "0000-01-01", "2026-02-30", "2026-01-01T24:00:00",
    "10000-01-01", "2026-01-01T00:00:00+99:99", "-2026-01-01", "2026-01-01T00:00:00.9999999999Z",
]  # fmt: skip
# Strings that may hold lone surrogates (json.dumps writes them as \udXXX escapes).
any_text = st.one_of(
    st.text(max_size=30),
    st.text(st.characters(codec=None, categories=["Cs", "Lu", "Cc"]), max_size=5),
    st.sampled_from(ODD_DATES),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # inf and nan too: json.dumps writes Infinity and NaN
    any_text,
)
any_json = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)),
    max_leaves=20,
)
filter_fields = st.sampled_from(["created_at", "doc_type", "doc_id", "tags", "is_active", "metadata.a", "and", "not"])
filters = st.dictionaries(
    st.one_of(filter_fields, any_text),
    st.one_of(any_json, st.dictionaries(st.sampled_from(["eq", "gt", "lt", "in", "any"]), any_json, max_size=2)),
    max_size=3,
)
retriever_names = st.one_of(st.sampled_from(["vector", "bm25"]), any_text)
expand_switches = st.sampled_from(["synonyms", "spelling", "max_expansions"])
search_bodies = st.fixed_dictionaries(
    {},
    optional={
        "query": st.one_of(any_text, scalars),
        "top_k": scalars,
        "mode": st.one_of(st.sampled_from(["vector", "bm25", "hybrid"]), any_text),
        "weights": st.one_of(st.dictionaries(retriever_names, scalars), any_json),
        "filters": st.one_of(filters, any_json),
        "candidates": scalars,
        "expand": st.one_of(st.dictionaries(expand_switches, scalars), any_json),
        "kb_ids": st.one_of(st.lists(scalars, max_size=3), any_json),
    },
)
deeply_nested = st.integers(min_value=500, max_value=5000).map(
    lambda depth: '{"query": "x", "filters": ' + '{"not": ' * depth + "{}" + "}" * depth + "}"
)
bodies = st.one_of(
    st.one_of(
        search_bodies.map(json.dumps),
        any_json.map(json.dumps),
        deeply_nested,
        st.integers(min_value=500, max_value=5000).map(lambda depth: "[" * depth + "]" * depth),
    ).map(str.encode),
    st.binary(max_size=40),
)
# What a client adds around the body: a query string (DRF reads ?format=, the lists ?limit= and ?offset=) and
# an Accept header the JSON renderer may not satisfy.
query_strings = st.dictionaries(
    st.sampled_from(["format", "limit", "offset", "q"]),
    st.one_of(st.sampled_from(["json", "api", "xml", "-1", "1e9", str(2**70)]), st.text(max_size=8)),
    max_size=2,
).map(lambda params: f"?{urlencode(params)}" if params else "")
accept_headers = st.sampled_from(["application/json", "*/*", "text/html", "application/xml", ""])


@pytest.fixture(scope="module")
def every_scope_key(django_db_setup, django_db_blocker, tmp_path_factory, embedder) -> str:
    """A key with every scope over a tiny knowledge base, so valid bodies reach every retriever."""
    with django_db_blocker.unblock():
        tenant = TenantFactory(name="fuzz-every-endpoint")
        folder = write_files(
            tmp_path_factory.mktemp("fuzz"),
            {
                "returns.md": ("# Returns\n\nUnopened items may be returned within 30 days.", {"tags": ["policy"]}),
                "kettle.txt": ("The PPR-9087 kettle boils 1.7 litres of water.", {"metadata": {"a": 1}}),
            },
        )
        ingest(folder, tenant, "fuzz")
        yield create_api_key(tenant=tenant, scopes=list(Scope.values)).raw_key
        tenant.delete()


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(("route", "view_class", "method"), API_ROUTES)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(body=bodies, query=query_strings, accept=accept_headers)
def test_arbitrary_json_never_gets_a_server_error(every_scope_key, route, view_class, method, body, query, accept):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {every_scope_key}", HTTP_ACCEPT=accept)
    response = client.generic(method, f"/{route}{query}", data=body, content_type="application/json")
    assert response.status_code < 500, (response.status_code, query, accept, body[:300], response.content[:300])
    if response.status_code == 204:  # a DELETE that found its document: no body
        return
    assert response["Content-Type"] == "application/json", response.content[:300]
    payload = response.json()
    if view_class is DifyRetrievalView:  # Dify's error shape there
        is_error = "error_code" in payload
    else:  # (a document's own "error" field is a string)
        is_error = isinstance(payload, dict) and isinstance(payload.get("error"), dict)
    assert is_error == (response.status_code >= 400), payload
    if is_error and view_class is not DifyRetrievalView:  # a code a client can act on, never the catch-all
        assert payload["error"]["code"] != "error" and payload["error"]["message"], (query, accept, payload)
