"""The console's search analytics page through Django's test client: its lists, its links to the
retrieval testing page (prefilled) and to the curation forms, and the curator's loop closed: a query
that found nothing finds its document once a synonym is added from the page, its cached answer expired."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.contrib.auth.models import User

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.selectors.search import searched_knowledge
from retrieval.cache import cached_search, search_cache_key
from retrieval.expansion import ExpansionOptions
from retrieval.search_log import flush
from retrieval.types import SearchRequest
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory, SearchLogFactory

pytestmark = pytest.mark.django_db

ANALYTICS = "/admin/retrieval/retrievalrun/analytics/"


def as_api_asks(body: dict) -> SearchRequest:
    return SearchRequest(**body, expand=ExpansionOptions())  # expansion switches unset: the tenant's


def links(html: str, css_class: str) -> list[str]:
    return [unescape(href) for href in re.findall(rf'<a href="([^"]+)" class="{css_class}"', html)]


def test_the_page_lists_a_kbs_queries_with_test_and_curation_links(admin_client):
    kb = KnowledgeBaseFactory()
    SearchLogFactory(tenant=kb.tenant, query="sky-10023908 manual", mode="bm25", hits=0, best_relevance=None)
    SearchLogFactory(tenant=kb.tenant, query="firmware update")
    page = admin_client.get(ANALYTICS, {"tenant": kb.tenant.pk, "knowledge_base": kb.pk})
    assert page.status_code == 200
    sections = {key: rows for key, _, rows in page.context["lists"]["sections"]}
    assert [row["stats"].query for row in sections["top"]] == ["firmware update", "sky-10023908 manual"]
    [empty] = sections["no-results"]
    assert empty["stats"].mode == "bm25"
    # The analyzer's terms of the query, each one click from a synonym or a protected term.
    assert [term["term"] for term in empty["curation"]] == ["sky-10023908", "manual"]

    html = page.content.decode()
    test_link = links(html, "test-link")[-1]
    testing = admin_client.get(test_link).content.decode()
    assert 'value="sky-10023908 manual"' in testing
    assert re.search(r'<option value="bm25" selected>', testing)
    assert re.search(rf'value="{kb.pk}"[^>]*checked', testing)
    protect = next(link for link in links(html, "add-protected") if "sky-10023908" in link)
    assert 'value="sky-10023908"' in admin_client.get(protect).content.decode()


def test_a_tenant_that_opted_out_is_said_to_be_unrecorded(admin_client):
    kb = KnowledgeBaseFactory(tenant__record_searches=False)
    html = admin_client.get(ANALYTICS, {"tenant": kb.tenant.pk}).content.decode()
    assert 'id="not-recording"' in html


def test_a_staff_user_sees_only_the_tenants_they_may_see(client):
    KnowledgeBaseFactory()
    client.force_login(User.objects.create_user("curator", password="pw", is_staff=True))
    assert "No tenant to show" in client.get(ANALYTICS).content.decode()


def test_a_query_that_found_nothing_finds_its_document_after_a_synonym_added_from_the_page(
    admin_client, tmp_path, embedder
):
    kb = create_knowledge_base(tenant=KnowledgeBaseFactory().tenant, name="shipping")
    (tmp_path / "orders.txt").write_text("Every order ships within two working days of payment.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    api = client_for(kb.tenant)
    body = {"query": "consignment", "mode": "bm25", "kb_ids": [kb.pk]}
    first = api.post("/api/v1/retrieval/search", body, format="json").json()
    assert (first["total"], first["cached"]) == (0, False)
    assert api.post("/api/v1/retrieval/search", body, format="json").json()["cached"] is True
    stale_key = search_cache_key(kb.tenant, as_api_asks(body), searched_knowledge(kb.tenant, [kb.pk]))
    flush()

    html = admin_client.get(ANALYTICS, {"tenant": kb.tenant.pk, "knowledge_base": kb.pk}).content.decode()
    no_results = html[html.index('id="no-results"') :]
    synonym_form = links(no_results, "add-synonym")[0]
    assert 'value="consignment"' in admin_client.get(synonym_form).content.decode()
    saved = admin_client.post(synonym_form.split("?")[0], {"tenant": kb.tenant.pk, "kind": "equivalent",
                              "terms": "consignment,order", "replacements": "", "weight": 0.8, "is_active": "on"})  # fmt: skip
    assert saved.status_code == 302

    after = api.post("/api/v1/retrieval/search", body, format="json").json()
    assert after["cached"] is False and after["total"] == 1
    assert after["results"][0]["source_uri"].endswith("orders.txt")
    kb.tenant.refresh_from_db()
    assert search_cache_key(kb.tenant, as_api_asks(body), searched_knowledge(kb.tenant, [kb.pk])) != stale_key
    assert (
        cached_search(kb.tenant, as_api_asks(body), logged=False).cached is True
    )  # the API's new answer, under the new key
