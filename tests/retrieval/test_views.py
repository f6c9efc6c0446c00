"""The retrieval endpoints through Django's full middleware stack (and once over a real socket): the
answer's shape and order, filters, knowledge bases, every mode's endpoint and tenant isolation. Every
expected ranking follows from the corpus' own text (``tests.retrieval.api_corpus``): a query paraphrasing
one passage must rank that passage first."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from knowledge.models import Chunk
from retrieval.serializers import SearchOutput
from tenants.services import create_api_key
from tests.factories import TenantFactory
from tests.retrieval.api_corpus import (
    GENERATED_ID,
    HIT_KEYS,
    JUPITER,
    KETTLE,
    MANUALS,
    RESPONSE_KEYS,
    URL,
    VAULT,
    assert_error,
    build_corpus,
    file_names,
    ok_results,
    search,
)

# === happy path ====================================================================================


@pytest.mark.slow
@pytest.mark.django_db
def test_response_has_the_documented_shape(corpus):
    response = search(corpus.client, {"query": "Can I send back an unopened item and get my money back?"})
    body = response.json()
    results = ok_results(response)

    assert set(body) == RESPONSE_KEYS
    assert body["mode"] == "vector" and body["reranked"] is False and body["degraded"] == []
    assert GENERATED_ID.match(body["request_id"])
    assert isinstance(body["latency_ms"], float) and 0 <= body["latency_ms"] < 60_000
    assert body["total"] == 4  # every chunk of the tenant: 4 one-chunk documents, default top_k 10
    for hit in results:
        assert set(hit) == HIT_KEYS
        assert hit["source"] == "vector"
        assert isinstance(hit["score"], float) and -1.0 <= hit["score"] <= 1.0
        assert isinstance(hit["relevance"], float) and 0.0 <= hit["relevance"] <= 1.0

    top = results[0]
    returns = corpus.doc("returns.md")
    chunk = Chunk.objects.get(document=returns)
    assert top["chunk_id"] == chunk.pk
    assert top["doc_id"] == returns.pk
    assert top["kb_id"] == corpus.kbs["manuals"].pk
    assert "within 30 days of delivery" in top["content"]
    assert top["title"] == "Return policy"  # from the sidecar
    assert top["source_uri"] == "manuals/returns.md"
    assert top["doc_type"] == "md"
    assert top["metadata"]["region"] == "eu"
    assert top["metadata"]["priority"] == 3
    assert top["metadata"]["shop"] == {"id": 7}
    assert top["metadata"]["tags"] == ["policy", "returns"]
    assert top["metadata"]["ordinal"] == 0


@pytest.mark.slow
@pytest.mark.django_db
def test_ranks_are_consecutive_and_scores_descend(corpus):
    results = ok_results(search(corpus.client, {"query": "kitchen appliance for hot water"}))
    assert [hit["rank"] for hit in results] == list(range(1, len(results) + 1))
    scores = [hit["score"] for hit in results]
    assert scores == sorted(scores, reverse=True)
    assert len({hit["chunk_id"] for hit in results}) == len(results)
    assert file_names(results)[0] == "kettle.txt"


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("How many days do I have to return an unopened product for a refund?", "returns.md"),
        ("How long does the electric kettle take to boil water?", "kettle.txt"),
        ("How much sun do tomato plants need, and when should I water them?", "garden.html"),
        ("Which planet is the biggest one in our solar system?", "jupiter.txt"),
    ],
)
def test_the_paraphrased_passage_ranks_first(corpus, query, expected):
    results = ok_results(search(corpus.client, {"query": query}))
    assert file_names(results)[0] == expected
    # A clear margin, not a coin toss: the paraphrase beats the runner-up.
    assert results[0]["score"] > results[1]["score"] + 0.2


@pytest.mark.slow
@pytest.mark.django_db
def test_exact_passage_text_scores_about_one(corpus):
    results = ok_results(search(corpus.client, {"query": JUPITER}))
    assert file_names(results)[0] == "jupiter.txt"
    assert results[0]["score"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_top_k_caps_the_results(corpus, top_k):
    results = ok_results(search(corpus.client, {"query": "refund for returned items", "top_k": top_k}))
    assert len(results) == top_k
    assert [hit["rank"] for hit in results] == list(range(1, top_k + 1))
    assert file_names(results)[0] == "returns.md"


@pytest.mark.slow
@pytest.mark.django_db
def test_top_k_larger_than_the_corpus_returns_every_chunk_once(corpus):
    results = ok_results(search(corpus.client, {"query": "anything", "top_k": 100}))
    assert sorted(hit["chunk_id"] for hit in results) == sorted(
        Chunk.objects.filter(tenant=corpus.tenant).values_list("pk", flat=True)
    )


@pytest.mark.slow
@pytest.mark.django_db
def test_kb_ids_restricts_the_search_to_those_knowledge_bases(corpus):
    astronomy, manuals = corpus.kbs["astronomy"], corpus.kbs["manuals"]
    # The query matches a "manuals" passage, yet only the astronomy KB may answer.
    results = ok_results(search(corpus.client, {"query": "refund for unopened returns", "kb_ids": [astronomy.pk]}))
    assert file_names(results) == ["jupiter.txt"]
    assert {hit["kb_id"] for hit in results} == {astronomy.pk}

    results = ok_results(search(corpus.client, {"query": "largest planet", "kb_ids": [manuals.pk]}))
    assert sorted(file_names(results)) == ["garden.html", "kettle.txt", "returns.md"]
    assert {hit["kb_id"] for hit in results} == {manuals.pk}

    both = ok_results(search(corpus.client, {"query": "largest planet", "kb_ids": [manuals.pk, astronomy.pk]}))
    assert file_names(both)[0] == "jupiter.txt"
    assert len(both) == 4


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"doc_type": "txt"}, {"kettle.txt", "jupiter.txt"}),
        ({"doc_type": {"eq": "md"}}, {"returns.md"}),
        ({"doc_type": {"in": ["md", "html"]}}, {"returns.md", "garden.html"}),
        ({"doc_type": {"nin": ["txt"]}}, {"returns.md", "garden.html"}),
        ({"doc_type": {"ne": "txt"}}, {"returns.md", "garden.html"}),
        ({"doc_type": "pdf"}, set()),
    ],
)
def test_doc_type_filters(corpus, filters, expected):
    results = ok_results(search(corpus.client, {"query": "water", "filters": filters}))
    assert set(file_names(results)) == expected


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"metadata.region": "eu"}, {"returns.md", "garden.html"}),
        ({"metadata.region": {"ne": "eu"}}, {"kettle.txt", "jupiter.txt"}),
        ({"metadata.region": {"in": ["us", "intl"]}}, {"kettle.txt", "jupiter.txt"}),
        ({"metadata.priority": {"gte": 2}}, {"returns.md", "garden.html"}),
        ({"metadata.priority": {"lt": 2}}, {"kettle.txt"}),
        ({"metadata.priority": {"exists": False}}, {"jupiter.txt"}),
        ({"metadata.shop.id": 7}, {"returns.md"}),
        ({"tags": "product"}, {"kettle.txt"}),
        ({"tags": {"any": ["space", "hobby"]}}, {"garden.html", "jupiter.txt"}),
        ({"tags": {"all": ["policy", "returns"]}}, {"returns.md"}),
        ({"metadata.region": "eu", "tags": "outdoor"}, {"garden.html"}),
        ({"or": [{"doc_type": "md"}, {"tags": "space"}]}, {"returns.md", "jupiter.txt"}),
        ({"not": {"metadata.region": "eu"}, "doc_type": "txt"}, {"kettle.txt", "jupiter.txt"}),
        (
            {"doc_type": {"ne": "faq"}, "created_at": {"gte": "2000-01-01"}},
            {"returns.md", "kettle.txt", "garden.html", "jupiter.txt"},
        ),
        ({"created_at": {"lt": "2000-01-01"}}, set()),
    ],
)
def test_metadata_tag_and_logical_filters(corpus, filters, expected):
    results = ok_results(search(corpus.client, {"query": "refund", "filters": filters}))
    assert set(file_names(results)) == expected


@pytest.mark.slow
@pytest.mark.django_db
def test_doc_id_filter_and_ranking_within_the_filtered_set(corpus):
    kettle, garden = corpus.doc("kettle.txt"), corpus.doc("garden.html")
    results = ok_results(
        search(corpus.client, {"query": "boiling water quickly", "filters": {"doc_id": {"in": [garden.pk, kettle.pk]}}})
    )
    assert [hit["doc_id"] for hit in results] == [kettle.pk, garden.pk]
    results = ok_results(search(corpus.client, {"query": "boiling water", "filters": {"doc_id": {"ne": kettle.pk}}}))
    assert kettle.pk not in {hit["doc_id"] for hit in results} and len(results) == 3


# === tenant isolation ==============================================================================


@pytest.fixture
def two_tenants(tmp_path, embedder):
    """Tenants A and B, each with a KB of the same name holding a document of the same file name."""
    tenant_a, tenant_b = TenantFactory(), TenantFactory()
    a_labels = {"tags": ["notes"], "metadata": {"region": "eu"}}
    b_labels = {"tags": ["notes", "secret"], "metadata": {"region": "ch"}}
    a = build_corpus(tmp_path, tenant_a, {"shared": {"notes.txt": (KETTLE, a_labels)}})
    b = build_corpus(tmp_path, tenant_b, {"shared": {"notes.txt": (VAULT, b_labels)}})
    return a, b


@pytest.mark.slow
@pytest.mark.django_db
def test_other_tenants_chunks_are_never_returned(two_tenants):
    a, b = two_tenants
    b_doc = b.doc("notes.txt")
    b_chunks = set(Chunk.objects.filter(tenant=b.tenant).values_list("pk", flat=True))
    assert b_chunks

    # Sanity: B's own search finds B's passage for this query, with a near-perfect score.
    b_results = ok_results(search(b.client, {"query": VAULT}))
    assert b_results[0]["chunk_id"] in b_chunks and b_results[0]["score"] > 0.99

    a_doc = a.doc("notes.txt")
    filter_variants = [
        None,
        {"doc_type": "txt"},
        {"doc_type": {"in": ["txt", "md"]}},
        {"doc_type": {"ne": "md"}},
        {"doc_id": b_doc.pk},
        {"doc_id": {"in": [b_doc.pk, a_doc.pk]}},
        {"created_at": {"gte": "2000-01-01"}},
        {"tags": "secret"},
        {"tags": {"any": ["secret", "notes"]}},
        {"tags": {"all": ["notes", "secret"]}},
        {"metadata.region": "ch"},
        {"metadata.region": {"exists": True}},
        {"metadata.region": {"ne": "eu"}},
        {"not": {"metadata.region": "eu"}},
        {"or": [{"metadata.region": "ch"}, {"tags": "secret"}, {"doc_id": b_doc.pk}]},
    ]
    for filters in filter_variants:
        body = {"query": VAULT, "top_k": 100} | ({"filters": filters} if filters is not None else {})
        results = ok_results(search(a.client, body))
        assert not {hit["chunk_id"] for hit in results} & b_chunks, filters
        assert all(hit["doc_id"] != b_doc.pk and hit["kb_id"] != b.kbs["shared"].pk for hit in results), filters
        assert all("vault" not in hit["content"].lower() for hit in results), filters
        # Whatever A gets back is A's own passage.
        assert all(hit["doc_id"] == a_doc.pk for hit in results), filters

    # Naming B's KB explicitly is a 404, not a way in.
    assert_error(search(a.client, {"query": VAULT, "kb_ids": [b.kbs["shared"].pk]}), 404, "knowledge_base_not_found")
    # And B does not see A's passage either.
    b_only = ok_results(search(b.client, {"query": KETTLE, "top_k": 100}))
    assert {hit["doc_id"] for hit in b_only} == {b_doc.pk}


# === over a real socket ============================================================================


@pytest.mark.slow
def test_search_over_a_real_http_socket(live_server, tmp_path, embedder):
    tenant = TenantFactory()
    build_corpus(tmp_path, tenant, {"manuals": MANUALS})
    raw_key = create_api_key(tenant=tenant).raw_key
    url = live_server.url + URL

    with httpx.Client(timeout=60) as http:
        response = http.post(
            url,
            json={"query": "How long does the kettle need to boil water?", "top_k": 2},
            headers={"Authorization": f"Bearer {raw_key}", "X-Request-ID": "live-test-1"},
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        assert response.headers["x-request-id"] == "live-test-1"
        body = response.json()
        assert body["request_id"] == "live-test-1"
        assert [Path(hit["source_uri"]).name for hit in body["results"]][0] == "kettle.txt"
        assert [hit["rank"] for hit in body["results"]] == [1, 2]

        missing = http.post(url, json={"query": "x"}, headers={"X-Request-ID": "bad id with spaces"})
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        rid = missing.headers["x-request-id"]
        assert GENERATED_ID.match(rid)
        assert missing.json() == {
            "error": {
                "code": "missing_api_key",
                "message": "Authentication credentials were not provided.",
                "request_id": rid,
            }
        }

        too_big = http.post(
            url,
            content=b'{"query": "' + b"y" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b'"}',
            headers={"Authorization": f"Bearer {raw_key}", "Content-Type": "application/json"},
        )
        assert too_big.status_code == 413
        assert too_big.json()["error"]["code"] == "payload_too_large"
        assert too_big.json()["error"]["request_id"] == too_big.headers["x-request-id"]

        not_found = http.get(live_server.url + "/api/v1/nothing-here")
        assert not_found.status_code == 404
        assert not_found.json()["error"]["code"] == "not_found"


# === the other endpoints ===========================================================================


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body", "mode"),
    [
        ("/api/v1/retrieval/bm25", {}, "bm25"),
        ("/api/v1/retrieval/hybrid", {}, "hybrid"),
        ("/api/v1/retrieval/search", {"mode": "bm25"}, "bm25"),
        ("/api/v1/retrieval/search", {}, "hybrid"),
    ],
)
def test_every_endpoint_answers_in_its_mode(corpus, path, body, mode):
    def post():
        return corpus.client.post(
            path, data=json.dumps({"query": "electric kettle boils water", **body}), content_type="application/json"
        )

    response = post()
    results = ok_results(response)
    assert response.json()["mode"] == mode
    assert file_names(results)[0] == "kettle.txt"
    assert all(set(hit) == HIT_KEYS and hit["source"] == mode for hit in results)
    assert set(results[0]["retrievers"]) == ({"bm25"} if mode == "bm25" else {"bm25", "vector"})
    # The view renders the body without the output serializer: it must be exactly what the
    # documented SearchOutput makes of it, fresh and from the cache, down to int vs float.
    cached = post().json()
    assert cached["cached"] is True and not response.json()["cached"]
    for answer in (response.json(), cached):
        assert json.dumps(SearchOutput(answer).data, sort_keys=True) == json.dumps(answer, sort_keys=True)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body", "needles"),
    [
        ("/api/v1/retrieval/search", {"mode": "sparse"}, ["mode", "sparse"]),
        ("/api/v1/retrieval/graph", {"hops": 4}, ["hops"]),
        ("/api/v1/retrieval/hybrid", {"weights": {"sparse": 1}}, ["weights", "sparse"]),
        ("/api/v1/retrieval/hybrid", {"weights": {"bm25": -1}}, ["weights"]),
        ("/api/v1/retrieval/hybrid", {"weights": {"vector": 0, "bm25": 0.0}}, ["weights", "at least one weight"]),
        ("/api/v1/retrieval/bm25", {"weights": {"bm25": 0}}, ["weights", "at least one weight"]),
        # Strict JSON types: nothing is coerced.
        ("/api/v1/retrieval/hybrid", {"weights": {"vector": True}}, ["weights", "valid number"]),
        ("/api/v1/retrieval/hybrid", {"weights": {"bm25": "1.5"}}, ["weights", "valid number"]),
        ("/api/v1/retrieval/hybrid", {"query": 123}, ["query", "valid string"]),
        ("/api/v1/retrieval/hybrid", {"query": ["kettle"]}, ["query", "valid string"]),
        ("/api/v1/retrieval/hybrid", {"top_k": "10"}, ["top_k", "valid integer"]),
        ("/api/v1/retrieval/hybrid", {"top_k": 10.0}, ["top_k", "valid integer"]),
        ("/api/v1/retrieval/hybrid", {"kb_ids": [True]}, ["kb_ids", "valid integer"]),
        ("/api/v1/retrieval/hybrid", {"rerank": 1}, ["rerank", "valid boolean"]),
        ("/api/v1/retrieval/hybrid", {"expand": {"synonyms": 0}}, ["synonyms", "valid boolean"]),
        ("/api/v1/retrieval/hybrid", {"expand": {"spelling": "true"}}, ["spelling", "valid boolean"]),
        ("/api/v1/retrieval/hybrid", {"candidates": 201}, ["candidates"]),
        ("/api/v1/retrieval/hybrid", {"rrf_k": 0}, ["rrf_k"]),
        ("/api/v1/retrieval/hybrid", {"score_threshold": 1.5}, ["score_threshold"]),
        ("/api/v1/retrieval/hybrid", {"dense_weight_floor": -0.1}, ["dense_weight_floor"]),
        ("/api/v1/retrieval/hybrid", {"aggregate": "mean"}, ["aggregate", "not a valid choice"]),
        ("/api/v1/retrieval/hybrid", {"group_by": "kb"}, ["group_by", "not a valid choice"]),
        ("/api/v1/retrieval/hybrid", {"fusion": "borda"}, ["fusion", "not a valid choice"]),
        ("/api/v1/retrieval/hybrid", {"rerank": "maybe"}, ["rerank"]),
        ("/api/v1/retrieval/hybrid", {"expand": {"max_expansions": 11}}, ["max_expansions"]),
        ("/api/v1/retrieval/hybrid", {"expand": "yes"}, ["expand"]),
    ],
)
def test_search_options_are_validated(api_client, path, body, needles):
    response = api_client.post(path, data=json.dumps({"query": "kettle", **body}), content_type="application/json")
    assert_error(response, 400, "invalid_request", *needles)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"candidates": 5, "top_k": 10},  # raised to top_k
        {"weights": {"vector": 0, "bm25": 2}},
        {"weights": {"vector": 1}},
        {"weights": {}},
        {"expand": {"synonyms": None, "max_expansions": 0}},
        {"query": "  kettle  ", "top_k": 1, "rerank": False},
        {"group_by": "document", "aggregate": "sum", "dense_weight_floor": 0.3},
        {"fusion": "relevance", "weights": {"vector": 0.5}},
        {"fusion": "minmax"},
    ],
)
def test_search_options_the_schema_allows_are_accepted(api_client, body):
    response = api_client.post(
        "/api/v1/retrieval/hybrid", data=json.dumps({"query": "kettle", **body}), content_type="application/json"
    )
    assert response.status_code == 200, response.content
