"""One failure rule over HTTP: a broken engine degrades a hybrid search and fails only the mode whose
sole retriever it is; the graph endpoint and three-way hybrid on the sample KB."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from django.conf import settings

from knowledge.models import Chunk, KnowledgeBase
from retrieval.serializers import SearchOutput
from tests.conftest import client_for, corrupt_keyword_index
from tests.retrieval.api_corpus import (
    Corpus,
    assert_error,
    file_names,
    ok_results,
    post_to,
)

# --- one failure rule: broken engines degrade a hybrid search and fail only a mode's sole retriever --


def post_mode(corpus: Corpus, mode: str, query: str = "electric kettle boils water", **extra):
    body = json.dumps({"query": query, "top_k": 3, "kb_ids": [corpus.kbs["manuals"].pk]})
    return corpus.client.post(f"/api/v1/retrieval/{mode}", data=body, content_type="application/json", **extra)


def assert_unavailable(response, code: str) -> None:
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["request_id"] == response["X-Request-ID"]


def assert_answered_by(response, retriever: str, degraded_stage: str, cause: str) -> list[dict]:
    results = ok_results(response)
    body = response.json()
    assert [(entry["stage"], entry["cause"]) for entry in body["degraded"]] == [(degraded_stage, cause)]
    assert body["cached"] is False
    assert results and all(set(hit["retrievers"]) == {retriever} for hit in results)
    return results


def degradation_warnings(caplog, stage: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "search degraded" and getattr(r, "stage", None) == stage]


@pytest.mark.slow
@pytest.mark.django_db
def test_a_corrupt_keyword_index_degrades_hybrid_and_fails_keyword_search(corpus, caplog):
    corrupt_keyword_index(settings.LEXICAL_INDEX_DIR, corpus.kbs["manuals"].active_version_id)
    hybrid = post_mode(corpus, "hybrid", HTTP_X_REQUEST_ID="rid-corrupt")
    assert file_names(assert_answered_by(hybrid, "vector", "bm25", "unreadable_index"))[0] == "kettle.txt"
    [warning] = degradation_warnings(caplog, "bm25")
    assert (warning.cause, warning.request_id) == ("unreadable_index", "rid-corrupt")
    assert post_mode(corpus, "hybrid").json()["cached"] is False  # degraded answers are never stored
    assert_unavailable(post_mode(corpus, "bm25"), "lexical_index_unavailable")
    vector = post_mode(corpus, "vector")
    assert file_names(ok_results(vector))[0] == "kettle.txt" and vector.json()["degraded"] == []


def use_embedding_model(kb: KnowledgeBase, model: Path) -> None:
    """Point the KB's active version at another model folder, as a swapped or damaged model would."""
    type(kb.active_version).objects.filter(pk=kb.active_version_id).update(embedding_model=str(model))


@pytest.mark.slow
@pytest.mark.django_db
def test_a_model_that_fails_to_load_degrades_hybrid_and_fails_vector_search(corpus, unloadable_model, caplog):
    use_embedding_model(corpus.kbs["manuals"], unloadable_model)
    hybrid = post_mode(corpus, "hybrid")
    assert file_names(assert_answered_by(hybrid, "bm25", "vector", "embedder_unavailable"))[0] == "kettle.txt"
    assert len(degradation_warnings(caplog, "vector")) == 1
    assert_unavailable(post_mode(corpus, "vector"), "embedder_unavailable")
    keyword = post_mode(corpus, "bm25")
    assert file_names(ok_results(keyword))[0] == "kettle.txt" and keyword.json()["degraded"] == []


@pytest.mark.slow
@pytest.mark.django_db
def test_a_torch_error_on_the_query_degrades_hybrid_and_fails_vector_search(corpus, overlong_model):
    use_embedding_model(corpus.kbs["manuals"], overlong_model)
    long_query = "electric kettle boils water" + " x" * 900  # more tokens than the model has positions
    assert_answered_by(post_mode(corpus, "hybrid", long_query), "bm25", "vector", "embedder_unavailable")
    assert_unavailable(post_mode(corpus, "vector", long_query), "embedder_unavailable")


@pytest.mark.slow
@pytest.mark.django_db
def test_vectors_that_disagree_with_their_dimension_fail_only_vector_search(corpus):
    """Rows claiming another dimension than their vectors have: pgvector itself fails the query."""
    kb = corpus.kbs["manuals"]
    type(kb.active_version).objects.filter(pk=kb.active_version_id).update(embedding_dim=383)
    Chunk.objects.filter(kb_version_id=kb.active_version_id).update(embedding_dim=383)
    assert_answered_by(post_mode(corpus, "hybrid"), "bm25", "vector", "internal_error")
    assert_unavailable(post_mode(corpus, "vector"), "vector_index_unavailable")


@pytest.mark.slow
@pytest.mark.django_db
def test_a_hybrid_search_whose_every_running_leg_fails_is_503(corpus, unloadable_model):
    corrupt_keyword_index(settings.LEXICAL_INDEX_DIR, corpus.kbs["manuals"].active_version_id)
    # A Chinese query skips the English-only dense leg: BM25 is this hybrid search's sole retriever.
    assert_unavailable(post_mode(corpus, "hybrid", "电水壶烧水"), "lexical_index_unavailable")
    use_embedding_model(corpus.kbs["manuals"], unloadable_model)
    assert_unavailable(post_mode(corpus, "hybrid"), "embedder_unavailable")  # both legs broken


@pytest.mark.slow
@pytest.mark.django_db
def test_searches_answer_while_redis_is_down(private_redis, corpus):
    private_redis()
    for mode in ("hybrid", "bm25", "vector"):
        response = post_mode(corpus, mode)
        assert file_names(ok_results(response))[0] == "kettle.txt"
        assert response.json()["degraded"] == [] and response.json()["cached"] is False


# --- graph retrieval ------------------------------------------------------------------------------

GRAPH_QUESTION = "Which battery pack does the PPR-9087 use?"


@pytest.mark.slow
@pytest.mark.django_db
def test_graph_endpoint_explains_each_hit_and_never_embeds(sample_kb):
    response = post_to(client_for(sample_kb.tenant), "graph", {"query": GRAPH_QUESTION, "top_k": 10})
    results = ok_results(response)
    body = response.json()
    assert body["mode"] == "graph" and "embed" not in body["timings_ms"] and "graph" in body["timings_ms"]
    assert SearchOutput(data=body).is_valid(), SearchOutput(data=body).errors
    paths = [hit["retrievers"]["graph"] for hit in results]
    assert all(path["entities"] and path["path"][0] in path["entities"] for path in paths)
    assert any(path["hops"] >= 1 for path in paths)
    assert any("PPR-9087-BAT" in hit["content"] for hit in results)


@pytest.mark.slow
@pytest.mark.django_db
def test_hybrid_fuses_the_graph_only_when_asked(sample_kb):
    client = client_for(sample_kb.tenant)
    two_way = post_to(client, "search", {"query": GRAPH_QUESTION, "mode": "hybrid"}).json()
    assert two_way["weights"]["graph"] == 0 and "graph" not in two_way["candidates"]
    for extra in ({"graph": True}, {"weights": {"graph": 0.5}}):
        three_way = post_to(client, "hybrid", {"query": GRAPH_QUESTION, "top_k": 100, **extra}).json()
        default = settings.SEARCH_WEIGHT_GRAPH_HYBRID
        assert three_way["weights"]["graph"] == extra.get("weights", {}).get("graph", default)
        assert three_way["candidates"]["graph"] > 0
        assert {"vector", "bm25", "graph"} <= {name for hit in three_way["results"] for name in hit["retrievers"]}


@pytest.mark.slow
@pytest.mark.django_db
def test_a_failing_graph_leg_degrades_hybrid_and_fails_graph_mode(sample_kb):
    from django.db import connection

    from knowledge.models import GraphEntity

    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(f"ALTER TABLE {GraphEntity._meta.db_table} RENAME TO graph_entity_gone")
    client = client_for(sample_kb.tenant)
    response = post_to(client, "hybrid", {"query": GRAPH_QUESTION, "graph": True})
    ok_results(response)
    body = response.json()
    assert [(d["stage"], d["cause"]) for d in body["degraded"]] == [("graph", "graph_unavailable")]
    assert body["results"]
    assert_error(post_to(client, "graph", {"query": GRAPH_QUESTION}), 503, "graph_unavailable")
