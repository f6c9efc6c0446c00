"""A caller's own query vector (a RAG engine that embedded the query already): searched as the query
would be, told apart in the result cache, and refused when it cannot serve the knowledge bases."""

from __future__ import annotations

import pytest

from engines.embedders import DEFAULT_LOCAL_MODEL
from tests.factories import DIMENSION, KnowledgeBaseFactory
from tests.retrieval.api_corpus import (
    URL,
    assert_error,
    file_names,
    ok_results,
    search,
)

# === the caller's own query vector ==================================================================


def query_vector(embedder, text: str, model: str = DEFAULT_LOCAL_MODEL) -> dict:
    """``text`` embedded by the real model, as a RAG engine would send it (JSON floats)."""
    return {"model": model, "values": [float(value) for value in embedder.embed_queries([text])[0]]}


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize("url", [URL, "/api/v1/retrieval/hybrid"])
def test_a_callers_vector_of_the_query_finds_what_the_query_finds(corpus, embedder, url):
    question = "how long do I have to send an item back"
    by_text = corpus.client.post(url, {"query": question, "top_k": 5}, format="json")
    body = {"query": question, "top_k": 5, "query_vector": query_vector(embedder, question)}
    by_vector = corpus.client.post(url, body, format="json")
    expected = [(hit["chunk_id"], hit["score"]) for hit in ok_results(by_text)]
    assert [(hit["chunk_id"], pytest.approx(hit["score"], abs=1e-6)) for hit in ok_results(by_vector)] == expected
    assert file_names(ok_results(by_vector))[0] == "returns.md"
    assert "embed" not in by_vector.json()["timings_ms"] and "embed" in by_text.json()["timings_ms"]


@pytest.mark.slow
@pytest.mark.django_db
def test_the_result_cache_tells_query_vectors_apart(corpus, embedder):
    """Same text, another vector: another answer, not the first one's cached entry."""
    returns = {"query": "help", "top_k": 1, "query_vector": query_vector(embedder, "returning an item for a refund")}
    planets = {**returns, "query_vector": query_vector(embedder, "the largest planet and its moons")}
    assert file_names(ok_results(search(corpus.client, returns))) == ["returns.md"]
    answer = search(corpus.client, planets)
    assert file_names(ok_results(answer)) == ["jupiter.txt"] and answer.json()["cached"] is False
    assert search(corpus.client, planets).json()["cached"] is True


@pytest.mark.slow
@pytest.mark.django_db
def test_a_vector_of_any_length_but_zero_is_searched_as_its_direction(corpus, embedder):
    vector = query_vector(embedder, "largest planet in the solar system")
    scaled = {**vector, "values": [value * 1e300 for value in vector["values"]]}
    expected = file_names(ok_results(search(corpus.client, {"query": "planet", "query_vector": vector})))
    assert file_names(ok_results(search(corpus.client, {"query": "planet", "query_vector": scaled}))) == expected


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("vector", "needle"),
    [
        ({"model": DEFAULT_LOCAL_MODEL, "values": []}, "values"),
        ({"model": DEFAULT_LOCAL_MODEL, "values": [0.0] * DIMENSION}, "zero vector"),
        ({"model": DEFAULT_LOCAL_MODEL, "values": [0.1, "0.2"]}, "values"),
        ({"model": DEFAULT_LOCAL_MODEL, "values": [0.1, None]}, "values"),
        ({"values": [0.1] * DIMENSION}, "model"),
        ({"model": DEFAULT_LOCAL_MODEL}, "values"),
        ([0.1] * DIMENSION, "query_vector"),
    ],
)
def test_an_unusable_query_vector_is_400(api_client, vector, needle):
    assert_error(search(api_client, {"query": "x", "query_vector": vector}), 400, "invalid_request", needle)


@pytest.mark.django_db
@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_query_vector_of_non_finite_numbers_is_400(api_client, number):
    body = f'{{"query": "x", "query_vector": {{"model": "m", "values": [0.5, {number}]}}}}'
    assert_error(api_client.post(URL, data=body, content_type="application/json"), 400, "malformed_json")


@pytest.mark.django_db
def test_a_vector_of_another_model_or_dimension_is_400_naming_the_expected_one(tenant, api_client):
    KnowledgeBaseFactory(tenant=tenant)
    other_model = {"model": "bge-m3", "values": [0.1] * DIMENSION}
    error = assert_error(search(api_client, {"query": "x", "query_vector": other_model}), 400, "query_vector_mismatch",
                         "bge-m3", DEFAULT_LOCAL_MODEL)  # fmt: skip
    assert error["details"] == {"expected_model": DEFAULT_LOCAL_MODEL, "model": "bge-m3"}
    shorter = {"model": DEFAULT_LOCAL_MODEL, "values": [0.1] * 768}
    error = assert_error(search(api_client, {"query": "x", "query_vector": shorter}), 400, "query_vector_mismatch",
                         "768", str(DIMENSION))  # fmt: skip
    assert error["details"] == {"expected_dimension": DIMENSION, "dimension": 768}


@pytest.mark.django_db
def test_one_vector_cannot_serve_knowledge_bases_of_two_models(tenant, api_client):
    KnowledgeBaseFactory(tenant=tenant)
    KnowledgeBaseFactory(tenant=tenant, embedding_model="remote:minilm")
    vector = {"model": DEFAULT_LOCAL_MODEL, "values": [0.1] * DIMENSION}
    error = assert_error(search(api_client, {"query": "x", "query_vector": vector}), 400, "query_vector_mismatch",
                         "different embedding models")  # fmt: skip
    assert error["details"] == {"models": sorted([DEFAULT_LOCAL_MODEL, "remote:minilm"])}


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["bm25", "graph"])
def test_a_query_vector_in_a_mode_without_a_dense_leg_is_400(tenant, api_client, mode):
    KnowledgeBaseFactory(tenant=tenant)
    body = {"query": "x", "mode": mode, "query_vector": {"model": DEFAULT_LOCAL_MODEL, "values": [0.1] * DIMENSION}}
    response = api_client.post("/api/v1/retrieval/search", body, format="json")
    assert_error(response, 400, "query_vector_not_applicable", mode)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("candidates", "needle"),
    [({"vectors": 5}, "unknown retriever"), ({}, "at least one"), ({"bm25": 0}, "bm25"), ({"vector": "5"}, "vector"),
     ({"graph": 201}, "200"), ([5], "integer")],
)  # fmt: skip
def test_bad_candidates_per_leg_are_400(api_client, candidates, needle):
    assert_error(search(api_client, {"query": "x", "candidates": candidates}), 400, "invalid_request", needle)
