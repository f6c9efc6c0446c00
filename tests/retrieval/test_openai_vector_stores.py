"""OpenAI's vector-store API (``/v1/vector_stores``) driven by the real ``openai`` SDK over real HTTP
(pytest-django's live server), and its filter mapping onto the service's filter language."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

from knowledge.knowledge_bases import update_search_settings
from retrieval.errors import InvalidFilter
from retrieval.openai_vector_stores import service_filter
from tenants.models import RateTier, Scope
from tenants.selectors import forget_api_keys
from tenants.services import create_api_key
from tests.factories import TenantFactory
from tests.retrieval.api_corpus import MANUALS, build_corpus

QUERY = "How should I return an unopened item for a refund?"


@pytest.fixture
def stores(live_server, tmp_path, embedder):
    """(OpenAI client of the "manuals" tenant, its KB, the other tenant's KB)."""
    corpus = build_corpus(tmp_path, TenantFactory(), {"manuals": MANUALS})
    other = build_corpus(tmp_path, TenantFactory(), {"private": {"vault.txt": ("The vault code is 4711.", None)}})
    key = create_api_key(tenant=corpus.tenant).raw_key
    # closed after the test: a kept-alive connection would hold a live-server thread and its database session
    with OpenAI(base_url=f"{live_server.url}/v1", api_key=key, max_retries=0) as client:
        yield client, corpus, other.kbs["private"], key


def test_openai_filters_map_onto_the_filter_language():
    assert service_filter({"key": "region", "type": "eq", "value": "eu"}) == {"metadata.region": {"eq": "eu"}}
    assert service_filter({"type": "and", "filters": [
        {"key": "priority", "type": "gte", "value": 2}, {"key": "doc_type", "type": "in", "value": ["md"]}]}) == {
        "and": [{"metadata.priority": {"gte": 2}}, {"doc_type": {"in": ["md"]}}]}  # fmt: skip
    assert service_filter({"key": "tags", "type": "nin", "value": ["x"]}) == {"not": {"tags": {"any": ["x"]}}}
    assert service_filter({"key": "tags", "type": "eq", "value": "x"}) == {"tags": "x"}
    for bad in ({"key": "a", "type": "like", "value": 1}, {"type": "or", "filters": []}, {"key": "a", "type": "eq"},
                {"key": "tags", "type": "gt", "value": "x"}, []):  # fmt: skip
        with pytest.raises(InvalidFilter):
            service_filter(bad)


@pytest.mark.slow
def test_the_openai_sdk_searches_a_knowledge_base(stores, live_server):
    client, corpus, other_kb, key = stores
    kb = corpus.kbs["manuals"]
    listed = client.vector_stores.list()
    assert [store.id for store in listed.data] == [str(kb.pk)]  # not the other tenant's
    store = client.vector_stores.retrieve(str(kb.pk))
    assert (store.name, store.object, store.file_counts.completed, store.status) == ("manuals", "vector_store", 3,
                                                                                      "completed")  # fmt: skip

    page = client.vector_stores.search(str(kb.pk), query=QUERY, max_num_results=5)
    results = list(page)
    assert results[0].filename.endswith("returns.md") and results[0].content[0].type == "text"
    assert results[0].attributes["title"] == "Return policy" and results[0].attributes["region"] == "eu"
    assert all(0 <= result.score <= 1 for result in results)
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    rest = httpx.post(f"{live_server.url}/api/v1/retrieval/hybrid", headers={"Authorization": f"Bearer {key}"},
                      json={"query": QUERY, "top_k": 5, "kb_ids": [kb.pk]}).json()  # fmt: skip
    assert [r.attributes["chunk_id"] for r in results] == [hit["chunk_id"] for hit in rest["results"]]

    eu = client.vector_stores.search(str(kb.pk), query=[QUERY], filters={"type": "and", "filters": [
        {"key": "region", "type": "eq", "value": "eu"}, {"key": "priority", "type": "gte", "value": 3}]})  # fmt: skip
    assert [r.filename.rsplit("/", 1)[-1] for r in eu.data] == ["returns.md"]
    threshold = max(r.score for r in results[1:]) + 1e-6
    strict = client.vector_stores.search(
        str(kb.pk), query=QUERY, ranking_options={"score_threshold": threshold}, rewrite_query=True
    )
    assert [r.filename for r in strict.data] == [results[0].filename]
    update_search_settings(kb, {"score_threshold": threshold})  # the KB's default, as a curator sets it
    by_default = client.vector_stores.search(str(kb.pk), query=QUERY, max_num_results=5)
    assert [r.filename for r in by_default.data] == [results[0].filename]  # applied when none is sent

    with pytest.raises(openai.BadRequestError) as unknown_field:
        client.vector_stores.search(str(kb.pk), query=QUERY, extra_body={"colour": "red"})
    assert unknown_field.value.code == "unknown_parameter" and "colour" in unknown_field.value.message
    with pytest.raises(openai.BadRequestError) as bad_filter:
        client.vector_stores.search(str(kb.pk), query=QUERY, filters={"key": "tags", "type": "gt", "value": "x"})
    assert bad_filter.value.code == "invalid_filter"
    for missing in (str(other_kb.pk), "vs_abc", str(10**9)):  # another tenant's answers like a missing one
        with pytest.raises(openai.NotFoundError) as not_found:
            client.vector_stores.search(missing, query=QUERY)
        assert not_found.value.code == "knowledge_base_not_found"
        with pytest.raises(openai.NotFoundError):
            client.vector_stores.retrieve(missing)


@pytest.mark.slow
def test_the_openai_endpoints_need_a_search_key(stores, live_server):
    client, corpus, _, _ = stores
    kb_id = str(corpus.kbs["manuals"].pk)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        client.with_options(api_key="rk_not_a_key").vector_stores.search(kb_id, query=QUERY)
    assert denied.value.code == "invalid_api_key"
    ingest_only = create_api_key(tenant=corpus.tenant, scopes=[Scope.INGEST]).raw_key
    with pytest.raises(openai.PermissionDeniedError) as scoped:
        client.with_options(api_key=ingest_only).vector_stores.list()
    assert scoped.value.code == "insufficient_scope"
    anonymous = httpx.get(f"{live_server.url}/v1/vector_stores")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "missing_api_key"


@pytest.mark.slow
def test_openai_searches_count_against_the_hybrid_limit(stores):
    client, corpus, _, _ = stores
    tenant = corpus.tenant
    tenant.rate_tier = RateTier.objects.create(name=f"tight-{tenant.pk}", requests_per_window=1000,
                                               endpoint_limits={"hybrid": 1})  # fmt: skip
    tenant.save()
    forget_api_keys()  # the tier is read with the key
    kb_id = str(corpus.kbs["manuals"].pk)
    client.vector_stores.search(kb_id, query=QUERY)
    with pytest.raises(openai.RateLimitError) as limited:
        client.vector_stores.search(kb_id, query="another question")
    assert limited.value.code == "rate_limited" and int(limited.value.response.headers["Retry-After"]) >= 1
