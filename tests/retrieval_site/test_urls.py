"""Every API endpoint of the URL conf, found by walking it: each declares and enforces a scope and a rate limit,
and arbitrary JSON never gets a 5xx or a non-JSON answer."""
from __future__ import annotations

import json

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
from tests.retrieval.test_views import ingest, write_files

# Public by design: the OpenAPI document and its Swagger UI (health, ready and metrics live outside /api/).
PUBLIC_API_ROUTES = {"api/schema/", "api/docs/"}


def api_routes() -> list[tuple[str, type]]:
    """``(path, view class)`` of every route under ``/api/``, walking includes."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith("api/"):
                found.append((route, pattern.callback.view_class))

    walk(get_resolver().url_patterns, "")
    return found


def test_the_walk_finds_every_api_endpoint():
    routes = {route for route, _ in api_routes()}
    expected = {f"api/v1/retrieval/{mode}" for mode in ("vector", "bm25", "hybrid", "search")}
    expected |= {"api/v1/stats", "api/v1/dify/retrieval"}
    assert expected | PUBLIC_API_ROUTES == routes


API_ROUTES = [(route, view_class) for route, view_class in api_routes() if route not in PUBLIC_API_ROUTES]


@pytest.mark.parametrize(("route", "view_class"), API_ROUTES)
def test_every_api_endpoint_declares_a_scope_and_a_rate_limit(route, view_class):
    assert HasScope in view_class.permission_classes, f"{route}: no HasScope permission"
    assert view_class.required_scope in Scope.values, f"{route}: required_scope is not a scope"
    assert issubclass(view_class, RateLimitedMixin), f"{route}: not rate limited"
    assert view_class.rate_limit_endpoint is not RateLimitedMixin.rate_limit_endpoint, f"{route}: no limit counter"


def call(route: str, view_class: type, client: Client):
    method = "POST" if hasattr(view_class, "post") else "GET"
    return client.generic(method, f"/{route}", data=b'{"query": "x"}', content_type="application/json")


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "view_class"), API_ROUTES)
def test_every_api_endpoint_enforces_its_scope_and_counts_calls(route, view_class):
    tenant = TenantFactory()
    other_scopes = [scope for scope in Scope.values if scope != view_class.required_scope]
    wrong_key = create_api_key(tenant=tenant, scopes=other_scopes).raw_key
    refused = call(route, view_class, Client(HTTP_AUTHORIZATION=f"Bearer {wrong_key}"))
    assert refused.status_code == 403, refused.content
    assert int(refused["X-RateLimit-Remaining"]) < int(refused["X-RateLimit-Limit"])
    anonymous = call(route, view_class, Client())
    assert "X-RateLimit-Limit" in anonymous, anonymous.content
    if view_class is DifyRetrievalView:  # Dify's codes: 1002 failed authorization, 1001 no usable header
        assert refused.json()["error_code"] == 1002
        assert (anonymous.status_code, anonymous.json()["error_code"]) == (403, 1001)
        return
    assert refused.json()["error"]["details"] == {"required_scope": view_class.required_scope}
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
@pytest.mark.parametrize(("route", "view_class"), API_ROUTES)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(body=bodies)
def test_arbitrary_json_never_gets_a_server_error(every_scope_key, route, view_class, body):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {every_scope_key}")
    method = "POST" if hasattr(view_class, "post") else "GET"
    response = client.generic(method, f"/{route}", data=body, content_type="application/json")
    assert response.status_code < 500, (response.status_code, body[:300], response.content[:300])
    assert response["Content-Type"] == "application/json", response.content[:300]
    payload = response.json()
    error_key = "error_code" if view_class is DifyRetrievalView else "error"  # Dify's error shape there
    assert (error_key in payload) == (response.status_code >= 400), payload
