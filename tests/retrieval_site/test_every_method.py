"""Every route of the URL conf outside the admin, with every HTTP method, answers below 500: OPTIONS and
TRACE too, with a key that may do anything, for ids that exist and for ids that do not."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from tenants.models import Scope
from tenants.services import create_api_key
from tests.factories import DocumentFactory, KnowledgeBaseFactory

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]
BODY = b'{"query": "x", "name": "walk"}'


def route_templates() -> list[str]:
    """Every route outside ``admin/``, its regex groups kept as ``{group}`` to fill in."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", str(pattern.pattern)).strip("^$")
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern):
                found.append(route)

    walk([p for p in get_resolver().url_patterns if not str(p.pattern).startswith("admin/")], "")
    return sorted(set(found))


ROUTES = route_templates()


def test_the_walk_finds_the_api_and_the_platform_routes():
    assert {"api/v1/knowledge-bases", "api/v1/knowledge-bases/{kb_id}/versions/{number}/activate", "health"} <= set(
        ROUTES
    )


@pytest.mark.django_db
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("ids", ["existing", "missing"])
def test_no_route_answers_a_server_error_to_any_method(route, method, ids):
    document = DocumentFactory()
    kb = document.knowledge_base
    key = create_api_key(tenant=kb.tenant, scopes=list(Scope.values)).raw_key
    existing = {"kb_id": kb.pk, "pk": document.pk, "doc_id": document.pk, "number": kb.active_version.number}
    values = existing if ids == "existing" else dict.fromkeys(existing, 987654)
    path = "/" + route.format(**values)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = client.generic(method, path, data=BODY, content_type="application/json")
    assert response.status_code < 500, (method, path, response.status_code, response.content[:400])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "route", ["api/v1/knowledge-bases", "api/v1/knowledge-bases/{kb_id}/documents", "api/v1/retrieval/search"]
)
def test_options_names_the_allowed_methods_and_points_at_the_schema(route):
    kb = KnowledgeBaseFactory()
    key = create_api_key(tenant=kb.tenant, scopes=list(Scope.values)).raw_key
    response = Client(HTTP_AUTHORIZATION=f"Bearer {key}").options("/" + route.format(kb_id=kb.pk))
    assert response.status_code == 200, response.content
    assert "OPTIONS" in response["Allow"]
    assert response.json()["schema"] == "/api/schema/"
    assert set(response.json()["methods"]) == {m.strip() for m in response["Allow"].split(",")}
