"""POST /api/v1/retrieval/vector through Django's full middleware stack (and once over a real socket).

Knowledge bases are built from small files written into ``tmp_path`` and ingested with the real
``ingest`` command and the real all-MiniLM-L6-v2 model, so every expected ranking below follows from
text written in this module: a query paraphrasing one passage must rank that passage first.
"""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from engines.embedders import DEFAULT_LOCAL_MODEL
from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.serializers import SearchOutput
from tenants.services import create_api_key, revoke_api_key
from tests.conftest import client_for, corrupt_keyword_index
from tests.factories import DIMENSION, KnowledgeBaseFactory, TenantFactory

URL = "/api/v1/retrieval/vector"
HIT_KEYS = {
    "chunk_id", "doc_id", "kb_id", "content", "score", "source", "rank",
    "title", "source_uri", "doc_type", "metadata", "section", "relevance",
    "fused_score", "rerank_score", "retrievers", "matched_queries", "document_score", "passages",
    "parent_id", "children",
}  # fmt: skip
RESPONSE_KEYS = {
    "results", "total", "latency_ms", "request_id", "mode", "queries", "weights", "reranked", "cached",
    "degraded", "notes", "notices", "candidates", "timings_ms", "critical_path_ms", "cost",
}  # fmt: skip
GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")

# --- the corpus: one short passage per file, each on a clearly different topic -------------------

RETURNS = (
    "# Returns and refunds\n\n"
    "Customers may return unopened items within 30 days of delivery and receive a full refund "
    "to their original payment method."
)
KETTLE = (
    "The stainless steel electric kettle boils 1.7 litres of water in under four minutes "
    "and switches itself off automatically when the water boils."
)
GARDEN = (
    "<html><head><title>Growing tomatoes</title></head><body>"
    "<p>Tomato seedlings need at least six hours of direct sunlight every day "
    "and should be watered deeply each morning.</p></body></html>"
)
JUPITER = "Jupiter is the largest planet in the solar system and is orbited by dozens of moons."
VAULT = "The vault combination for the Zurich branch is written in the blue ledger kept under the clock tower."

MANUALS = {
    "returns.md": (RETURNS, {"title": "Return policy", "tags": ["policy", "returns"],
                             "metadata": {"region": "eu", "priority": 3, "shop": {"id": 7}}}),
    "kettle.txt": (KETTLE, {"title": "Kettle manual", "tags": ["product"],
                            "metadata": {"region": "us", "priority": 1}}),
    "garden.html": (GARDEN, {"tags": ["hobby", "outdoor"], "metadata": {"region": "eu", "priority": 2}}),
}  # fmt: skip
ASTRONOMY = {"jupiter.txt": (JUPITER, {"tags": ["space"], "metadata": {"region": "intl"}})}


def write_files(folder: Path, files: dict[str, tuple[str, dict | None]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (text, sidecar) in files.items():
        (folder / name).write_text(text, encoding="utf-8")
        if sidecar is not None:
            (folder / f"{name}.meta.json").write_text(json.dumps(sidecar), encoding="utf-8")
    return folder


def ingest(folder: Path, tenant, kb_name: str) -> KnowledgeBase:
    out = io.StringIO()
    call_command(
        "ingest", str(folder), tenant=tenant.name, kb=kb_name, no_progress=True, stdout=out, stderr=io.StringIO()
    )
    assert " 0 failed" in out.getvalue(), out.getvalue()
    return KnowledgeBase.objects.get(tenant=tenant, name=kb_name)


@dataclass
class Corpus:
    tenant: object
    client: object
    kbs: dict[str, KnowledgeBase]
    docs: dict[str, Document] = field(default_factory=dict)  # by file name

    def doc(self, name: str) -> Document:
        return self.docs[name]


def build_corpus(tmp_path: Path, tenant, layout: dict[str, dict]) -> Corpus:
    kbs, docs = {}, {}
    for kb_name, files in layout.items():
        kb = ingest(write_files(tmp_path / tenant.name / kb_name, files), tenant, kb_name)
        kbs[kb_name] = kb
        for document in Document.objects.filter(knowledge_base=kb):
            docs[Path(document.source_uri).name] = document
    return Corpus(tenant=tenant, client=client_for(tenant), kbs=kbs, docs=docs)


@pytest.fixture
def corpus(tmp_path, tenant, embedder) -> Corpus:
    """The caller's tenant: KB "manuals" (3 documents) and KB "astronomy" (1 document)."""
    return build_corpus(tmp_path, tenant, {"manuals": MANUALS, "astronomy": ASTRONOMY})


def search(client, body, **extra):
    return client.post(URL, data=json.dumps(body), content_type="application/json", **extra)


def ok_results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["total"] == len(body["results"])
    assert body["request_id"] == response["X-Request-ID"]
    return body["results"]


def file_names(results) -> list[str]:
    return [Path(hit["source_uri"]).name for hit in results]


def assert_error(response, status: int, code: str, *needles: str) -> dict:
    """The one error shape: JSON ``{"error": {code, message, request_id}}`` tied to the X-Request-ID header."""
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"].startswith("application/json")
    body = json.loads(response.content)
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    for needle in needles:
        assert needle.lower() in error["message"].lower(), (needle, error["message"])
    assert error["request_id"] == response["X-Request-ID"]
    assert GENERATED_ID.match(error["request_id"])
    return error


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


# === errors ========================================================================================


def test_missing_key_is_401_with_www_authenticate(client):
    response = client.post(URL, data=json.dumps({"query": "x"}), content_type="application/json")
    assert_error(response, 401, "missing_api_key", "credentials were not provided")
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", ["Basic dXNlcjpwYXNz", "Token rk_abc_def", "Bearer", "Bearer    ", "Bearerrk_abc_def", "rk_abc_def"]
)
def test_malformed_authorization_header_is_403(client, header):
    response = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION=header)
    assert_error(response, 403, "invalid_api_key", "Authorization header must be 'Bearer <api key>'")
    assert "WWW-Authenticate" not in response


@pytest.mark.django_db
def test_wrong_revoked_and_expired_keys_are_403(client, tenant):
    valid = create_api_key(tenant=tenant).raw_key
    revoked = create_api_key(tenant=tenant)
    revoke_api_key(revoked.api_key)
    expired = create_api_key(tenant=tenant, expires_at=timezone.now() - timedelta(seconds=1))
    tampered = valid[:-1] + ("A" if valid[-1] != "A" else "B")
    unknown = f"rk_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"
    for raw_key in [tampered, unknown, "not-a-key", revoked.raw_key, expired.raw_key]:
        response = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw_key}")
        assert_error(response, 403, "invalid_api_key", "invalid, expired or revoked")
    # The valid key of the same tenant passes authentication (and fails later, on the empty body).
    response = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {valid}")
    assert_error(response, 400, "invalid_request", "query")


@pytest.mark.django_db
def test_x_api_key_header_is_accepted(client, tenant):
    raw_key = create_api_key(tenant=tenant).raw_key
    response = client.post(
        URL, data=json.dumps({"query": "hello"}), content_type="application/json", HTTP_X_API_KEY=raw_key
    )
    assert response.status_code == 200
    assert response.json()["results"] == [] and response.json()["total"] == 0  # the tenant has no KB yet
    bad = client.post(URL, data="{}", content_type="application/json", HTTP_X_API_KEY=raw_key + "x")
    assert_error(bad, 403, "invalid_api_key", "invalid")


@pytest.mark.django_db
def test_unknown_and_foreign_kb_ids_are_the_same_404(api_client, tenant):
    foreign = KnowledgeBaseFactory(tenant=TenantFactory())
    unknown_id = foreign.pk + 10_000
    assert not KnowledgeBase.objects.filter(pk=unknown_id).exists()

    unknown = assert_error(
        search(api_client, {"query": "x", "kb_ids": [unknown_id]}), 404, "knowledge_base_not_found", str(unknown_id)
    )
    other = assert_error(
        search(api_client, {"query": "x", "kb_ids": [foreign.pk]}), 404, "knowledge_base_not_found", str(foreign.pk)
    )
    # No existence leak: apart from the id itself, the two answers are identical.
    assert unknown["message"].replace(str(unknown_id), "<id>") == other["message"].replace(str(foreign.pk), "<id>")
    assert unknown["message"] == f"unknown knowledge base id(s): {unknown_id}"
    assert unknown.get("details") == {"kb_ids": [unknown_id]}
    assert other.get("details") == {"kb_ids": [foreign.pk]}


@pytest.mark.django_db
def test_own_kb_next_to_a_foreign_kb_names_only_the_foreign_id(api_client, tenant):
    own = KnowledgeBaseFactory(tenant=tenant)
    foreign = KnowledgeBaseFactory(tenant=TenantFactory())
    error = assert_error(
        search(api_client, {"query": "x", "kb_ids": [own.pk, foreign.pk]}), 404, "knowledge_base_not_found"
    )
    assert error["message"] == f"unknown knowledge base id(s): {foreign.pk}"


@pytest.mark.django_db
def test_oversized_body_is_413(api_client):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({"query": "x", "padding": "y" * limit})
    assert len(body.encode()) > limit
    response = api_client.post(URL, data=body, content_type="application/json")
    assert_error(response, 413, "payload_too_large", "larger than the allowed maximum")


@pytest.mark.django_db
def test_body_just_under_the_limit_is_parsed(api_client):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    prefix, suffix = '{"query": "', '"}'
    body = prefix + "y" * (limit - len(prefix) - len(suffix)) + suffix
    assert len(body.encode()) == limit
    # Parsed, then refused by validation (query too long), not by size.
    assert_error(api_client.post(URL, data=body, content_type="application/json"), 400, "invalid_request", "query")


@pytest.mark.django_db
@pytest.mark.parametrize("body", ['{"query": "x"', "{'query': 'x'}", '{"query": NaN}', "\xff\xfe"])
def test_malformed_json_is_400(api_client, body):
    response = api_client.post(URL, data=body, content_type="application/json")
    assert_error(response, 400, "malformed_json", "JSON parse error")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([{"query": "x"}], "Expected a dictionary, but got list"),
        ("just a string", "Expected a dictionary, but got str"),
        (42, "Expected a dictionary, but got int"),
        (None, "No data provided"),
    ],
)
def test_body_that_is_not_an_object_is_400(api_client, body, needle):
    assert_error(search(api_client, body), 400, "invalid_request", needle)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({}, ["query: This field is required."]),
        ({"top_k": 5}, ["query: This field is required."]),
        ({"query": ""}, ["query: This field may not be blank."]),
        ({"query": "   \n\t "}, ["query: This field may not be blank."]),
        ({"query": None}, ["query: This field may not be null."]),
        ({"query": "x" * 2001}, ["query:", "2000"]),
        ({"query": "x", "top_k": 0}, ["top_k:", "greater than or equal to 1"]),
        ({"query": "x", "top_k": 101}, ["top_k:", "less than or equal to 100"]),
        ({"query": "x", "top_k": "ten"}, ["top_k: A valid integer is required."]),
        ({"query": "x", "top_k": 2.5}, ["top_k: A valid integer is required."]),
        ({"query": "x", "kb_ids": 5}, ["kb_ids:", "list"]),
        ({"query": "x", "kb_ids": "5"}, ["kb_ids:", "list"]),
        ({"query": "x", "kb_ids": {"id": 5}}, ["kb_ids:", "list"]),
        ({"query": "x", "kb_ids": ["five"]}, ["kb_ids:", "valid integer"]),
        ({"query": "x", "kb_ids": [0]}, ["kb_ids:", "greater than or equal to 1"]),
        ({"query": "x", "kb_ids": list(range(1, 102))}, ["kb_ids:", "100"]),
        ({"query": "x", "filters": None}, ["filters: This field may not be null."]),
    ],
)
def test_invalid_parameters_are_400_naming_the_field(api_client, body, needles):
    assert_error(search(api_client, body), 400, "invalid_request", *needles)


@pytest.mark.django_db
def test_several_invalid_fields_are_all_named(api_client):
    error = assert_error(search(api_client, {"query": "", "top_k": 0}), 400, "invalid_request", "query:", "top_k:")
    assert set(error["details"]) == {"query", "top_k"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "needles", "details"),
    [
        ({"colour": "red"}, ["unknown field 'colour'"], {"field": "colour"}),
        (
            {"or": [{"doc_type": "md"}, {"author": "me"}]},
            ["filters.or[1]", "unknown field 'author'"],
            {"field": "author"},
        ),
        (
            {"doc_type": {"like": "m%"}},
            ["filters.doc_type", "unknown operator 'like'"],
            {"field": "doc_type", "operator": "like"},
        ),
        (
            {"metadata.region": {"between": [1, 2]}},
            ["unknown operator 'between'"],
            {"field": "metadata.region", "operator": "between"},
        ),
        ({"tags": {"eq": "x"}}, ["unknown operator 'eq' for 'tags'"], {"field": "tags", "operator": "eq"}),
    ],
)
def test_unknown_filter_fields_and_operators_are_named(api_client, filters, needles, details):
    error = assert_error(search(api_client, {"query": "x", "filters": filters}), 400, "invalid_filter", *needles)
    assert error["details"] == details


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        (["doc_type", "md"], "filters: expected a JSON object, got array"),
        ({"doc_id": "7"}, "filters.doc_id.eq: expected an integer, got string"),
        ({"doc_type": {"in": []}}, "filters.doc_type.in: expected a non-empty list"),
        ({"created_at": {"gte": "yesterday"}}, "'yesterday' is not an ISO date or datetime"),
        ({"metadata.region": {"exists": "yes"}}, "expected true or false"),
        ({"metadata.": 1}, "invalid metadata key"),
        ({"or": []}, "filters.or: expected a non-empty list"),
        ({"doc_type": {}}, "empty operator object"),
    ],
)
def test_ill_typed_filters_are_400(api_client, filters, needle):
    assert_error(search(api_client, {"query": "x", "filters": filters}), 400, "invalid_filter", needle)


@pytest.mark.django_db
def test_wrong_content_type_is_415(api_client):
    response = api_client.post(URL, data='{"query": "x"}', content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type", 'Unsupported media type "text/plain"')
    form = api_client.post(URL, data={"query": "x"}, format="multipart")
    assert_error(form, 415, "unsupported_media_type", "multipart/form-data")


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_are_405(api_client, method):
    response = getattr(api_client, method)(URL)
    assert_error(response, 405, "method_not_allowed", f'Method "{method.upper()}" not allowed')
    assert "POST" in response["Allow"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/api/v1/retrieval/keyword", "/api/v2/retrieval/vector", "/api/", "/api/v1/retrieval/vector/extra"]
)
def test_unknown_api_path_is_a_json_404(api_client, path):
    response = api_client.post(path, data="{}", content_type="application/json")
    assert_error(response, 404, "not_found", "No such endpoint")
    assert_error(api_client.get(path), 404, "not_found", "No such endpoint")


def test_unknown_api_path_is_a_json_404_without_a_key(client):
    assert_error(client.get("/api/nope"), 404, "not_found", "No such endpoint")


@pytest.mark.slow
@pytest.mark.django_db
def test_query_is_trimmed_before_embedding(corpus):
    padded = ok_results(search(corpus.client, {"query": "   " + JUPITER + "\n\t"}))
    exact = ok_results(search(corpus.client, {"query": JUPITER}))
    assert [(h["chunk_id"], h["score"]) for h in padded] == [(h["chunk_id"], h["score"]) for h in exact]


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ({"doc_type": "t\u0000xt"}, "filters.doc_type.eq: strings may not contain NUL"),
        ({"metadata.region": "e\u0000u"}, "filters.metadata.region.eq: strings may not contain NUL"),
        ({"metadata.reg\u0000ion": {"exists": True}}, "invalid metadata key"),
        ({"tags": "poli\u0000cy"}, "filters.tags.contains: strings may not contain NUL"),
        ({"doc_type": {"in": ["md", "t\u0000xt"]}}, "strings may not contain NUL"),
    ],
    ids=["doc_type", "metadata-value", "metadata-key", "tags", "doc_type-in"],
)
def test_nul_character_in_a_filter_string_is_400_not_500(corpus, filters, needle):
    # The tenant has chunks, so an unchecked NUL would reach PostgreSQL (which rejects it: a 500).
    client = Client(raise_request_exception=False)
    response = client.post(
        URL,
        data=json.dumps({"query": "refund", "filters": filters}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {create_api_key(tenant=corpus.tenant).raw_key}",
    )
    assert_error(response, 400, "invalid_filter", needle)


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    "filters",
    [{"metadata.priority": {"gt": "abc"}}, {"metadata.region": {"lt": 5}}],
    ids=["number-field-vs-string", "string-field-vs-number"],
)
def test_range_filter_never_matches_values_of_another_json_type(corpus, filters):
    # priority is a number and region a string in every document that has them; jsonb itself orders
    # every string below every number, so only a same-type guard keeps these empty.
    assert ok_results(search(corpus.client, {"query": "refund", "filters": filters})) == []


@pytest.mark.slow
@pytest.mark.django_db
def test_string_range_filter_compares_lexically(corpus):
    results = ok_results(search(corpus.client, {"query": "refund", "filters": {"metadata.region": {"gte": "f"}}}))
    assert set(file_names(results)) == {"jupiter.txt", "kettle.txt"}  # "intl" and "us" sort after "f"; "eu" before


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


def post_to(client, path: str, body: dict):
    return client.post(f"/api/v1/retrieval/{path}", data=json.dumps(body), content_type="application/json")


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
