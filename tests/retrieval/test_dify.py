"""Dify's External Knowledge API (``retrieval.dify``): Dify's documented request shapes replayed against the
sample knowledge base, Dify's answer and error shapes, scores, and every comparison operator of
``metadata_condition`` checked against the rows it selects."""
from __future__ import annotations

import json
from operator import eq, ge, gt, le, lt
from pathlib import Path
from typing import Any, Callable

import pytest

from engines import get_lexical_index
from knowledge.models import Chunk
from knowledge.selectors import analyzer_for_tenant
from retrieval.dify import OPERATORS, filters_from_metadata_condition
from retrieval.errors import InvalidFilter
from retrieval.filters import compile_filters
from tenants.services import create_api_key, revoke_api_key
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory, TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

URL = "/api/v1/dify/retrieval"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dify"
MISSING = object()


def fixture(name: str, knowledge_id: str | None = None) -> dict:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    if knowledge_id is not None:
        text = text.replace("{knowledge_id}", knowledge_id)
    return json.loads(text)


def post(client, body: Any, **headers):
    return client.post(URL, body, format="json", **headers)


def dify_request(kb, query: str, *, top_k: int) -> dict:
    return {"knowledge_id": str(kb.pk), "query": query, "retrieval_setting": {"top_k": top_k, "score_threshold": 0.0}}


def hybrid_hits(client, kb, query: str, *, top_k: int) -> list[dict]:
    """The same search through the service's own hybrid endpoint."""
    body = {"query": query, "top_k": top_k, "kb_ids": [kb.pk]}
    return client.post("/api/v1/retrieval/hybrid", body, format="json").json()["results"]


@pytest.fixture
def dify(sample_kb):
    """An API client with a key of the sample KB's tenant."""
    return client_for(sample_kb.tenant)


# --- Dify's documented requests ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["request_docs_example.json", "request_threshold_disabled.json", "request_metadata_condition.json"]
)
def test_documented_requests_get_records_in_difys_shape(dify, sample_kb, name):
    request = fixture(name, str(sample_kb.pk))
    response = post(dify, request)
    assert response.status_code == 200, response.content
    body = response.json()
    documented = fixture("response_docs_example.json")
    assert set(body) == set(documented)
    setting = request["retrieval_setting"]
    assert 0 < len(body["records"]) <= setting["top_k"]
    documented_keys = set(documented["records"][0])
    for record in body["records"]:
        assert set(record) == documented_keys
        assert isinstance(record["content"], str) and record["content"]
        assert isinstance(record["title"], str) and record["title"]
        assert isinstance(record["score"], float) and setting["score_threshold"] <= record["score"] <= 1.0
        metadata = record["metadata"]
        assert isinstance(metadata, dict)  # Dify fails on a null metadata
        assert metadata["path"].startswith("sample_kb/") and metadata["kb_id"] == sample_kb.pk
        assert {"source", "doc_id", "chunk_id", "doc_type"} <= set(metadata)


def test_metadata_condition_selects_only_matching_passages(dify, sample_kb):
    response = post(dify, fixture("request_metadata_condition.json", str(sample_kb.pk)))
    records = response.json()["records"]
    assert records
    for record in records:
        assert "policy" in record["metadata"]["category"] and record["metadata"]["lang"] in ("en", "mixed")


def test_records_are_the_hybrid_search_with_relevance_as_score(dify, sample_kb):
    """Same hits, same order as /hybrid; each score is the hit's relevance, the search's own."""
    query = "How should I store the lithium battery pack?"
    hits = hybrid_hits(dify, sample_kb, query, top_k=5)
    records = post(dify, dify_request(sample_kb, query, top_k=5)).json()["records"]
    assert [r["metadata"]["chunk_id"] for r in records] == [hit["chunk_id"] for hit in hits]
    assert [r["score"] for r in records] == [hit["relevance"] for hit in hits]
    assert [r["content"] for r in records] == [hit["content"] for hit in hits]


def test_score_threshold_drops_lower_scores(dify, sample_kb):
    request = dify_request(sample_kb, "How do I return an item for a refund?", top_k=10)
    scores = [record["score"] for record in post(dify, request).json()["records"]]
    assert len(set(scores)) > 1
    threshold = sorted(scores)[len(scores) // 2]
    request["retrieval_setting"]["score_threshold"] = threshold
    kept = [record["score"] for record in post(dify, request).json()["records"]]
    assert kept == [score for score in scores if score >= threshold]
    request["retrieval_setting"]["score_threshold"] = max(scores) + 1e-6
    assert post(dify, request).json() == {"records": []}


def test_keyword_only_hits_score_against_the_querys_highest_possible_bm25(dify, sample_kb):
    """A Chinese query against the English-only model skips the dense leg: BM25 over its ceiling in
    the KB's index, not over the answer's best hit (so the best keyword match is not always 1.0)."""
    query = "帮我查下订单 ORD-2026-000817 的进度"
    records = post(dify, dify_request(sample_kb, query, top_k=3)).json()["records"]
    hits = hybrid_hits(dify, sample_kb, query, top_k=3)
    assert hits and all(set(hit["retrievers"]) == {"bm25"} for hit in hits)
    tokens = analyzer_for_tenant(sample_kb.tenant_id).tokens(query)
    ceiling = get_lexical_index().max_score(sample_kb.active_version_id, tokens)
    expected = [round(hit["retrievers"]["bm25"]["score"] / ceiling, 6) for hit in hits]
    assert [r["score"] for r in records] == pytest.approx(expected, abs=2e-6)
    assert 0 < records[-1]["score"] <= records[0]["score"] < 1.0


# --- errors: Dify's shape on this endpoint only -------------------------------------------------------


def assert_dify_error(response, status: int, error_code: int):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == set(fixture("error_docs_example.json"))
    assert body["error_code"] == error_code and isinstance(body["error_msg"], str) and body["error_msg"]


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer", "Bearer   ", "Token abc"])
def test_a_malformed_authorization_header_is_1001(sample_kb, client, header):
    headers = {} if header is None else {"HTTP_AUTHORIZATION": header}
    response = client.post(URL, fixture("request_docs_example.json", str(sample_kb.pk)), "application/json", **headers)
    assert_dify_error(response, 403, 1001)


def test_a_key_that_fails_authorization_is_1002(sample_kb, client):
    body = fixture("request_docs_example.json", str(sample_kb.pk))
    unknown = client.post(URL, body, "application/json", HTTP_AUTHORIZATION="Bearer rk_not_a_key")
    assert_dify_error(unknown, 403, 1002)
    revoked = create_api_key(tenant=sample_kb.tenant)
    revoke_api_key(revoked.api_key)
    response = client.post(URL, body, "application/json", HTTP_AUTHORIZATION=f"Bearer {revoked.raw_key}")
    assert_dify_error(response, 403, 1002)
    ingest_only = create_api_key(tenant=sample_kb.tenant, scopes=["ingest"])
    response = client.post(URL, body, "application/json", HTTP_AUTHORIZATION=f"Bearer {ingest_only.raw_key}")
    assert_dify_error(response, 403, 1002)


def test_a_knowledge_id_the_key_does_not_have_is_2001(dify, sample_kb):
    other_tenant_kb = KnowledgeBaseFactory(tenant=TenantFactory())
    for knowledge_id in ["AAA-BBB-CCC", str(other_tenant_kb.pk), str(10**12), "0", "-1", "1.0", "9" * 30, "", " "]:
        request = {**fixture("request_docs_example.json"), "knowledge_id": knowledge_id}
        assert_dify_error(post(dify, request), 404, 2001)


@pytest.mark.parametrize(
    "change",
    [
        {"retrieval_setting": None},
        {"retrieval_setting": {"top_k": 0, "score_threshold": 0.5}},
        {"retrieval_setting": {"top_k": 3, "score_threshold": 1.5}},
        {"query": ""},
        {"query": " \t "},
        {"query": 123},
        {"metadata_condition": {"conditions": [{"name": "category", "comparison_operator": "like", "value": "x"}]}},
        {"metadata_condition": {"conditions": [{"name": "doc_id", "comparison_operator": "contains", "value": "1"}]}},
        {"metadata_condition": {"conditions": [{"name": "shop_id", "comparison_operator": ">", "value": "many"}]}},
        {"metadata_condition": {"conditions": [{"name": "", "comparison_operator": "is", "value": "x"}]}},
    ],
)
def test_a_bad_body_is_400_in_difys_shape(dify, sample_kb, change):
    request = {**fixture("request_docs_example.json", str(sample_kb.pk)), **change}
    assert_dify_error(post(dify, request), 400, 400)


def test_other_endpoints_keep_the_services_error_shape(client):
    response = client.post("/api/v1/retrieval/hybrid", {"query": "x"}, "application/json")
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"code", "message", "request_id"}


def test_rate_limits_count_against_the_hybrid_limit(dify, sample_kb):
    tier = sample_kb.tenant.rate_tier
    response = post(dify, fixture("request_docs_example.json", str(sample_kb.pk)))
    assert response["X-RateLimit-Limit"] == str(tier.limit_for("hybrid"))


# --- every comparison operator, against the rows it selects -------------------------------------------


def meta(chunk: Chunk, name: str) -> Any:
    return chunk.metadata.get(name, MISSING)


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def as_number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare(value: Any, op: Callable[[Any, Any], bool], operand: float) -> bool:
    number = as_number(value)
    return number is not None and op(number, operand)


# (name, operator, value, predicate over a chunk)
OPERATOR_CASES: list[tuple[str, str, Any, Callable[[Chunk], bool]]] = [
    ("category", "contains", "lic", lambda c: is_text(meta(c, "category")) and "lic" in meta(c, "category")),
    ("category", "not contains", "lic", lambda c: not (is_text(meta(c, "category")) and "lic" in meta(c, "category"))),
    ("category", "start with", "pol", lambda c: is_text(meta(c, "category")) and meta(c, "category").startswith("pol")),
    ("category", "end with", "ct", lambda c: is_text(meta(c, "category")) and meta(c, "category").endswith("ct")),
    ("category", "is", "policy", lambda c: meta(c, "category") == "policy"),
    ("category", "is not", "policy", lambda c: meta(c, "category") != "policy"),
    ("region", "empty", None, lambda c: meta(c, "region") in (MISSING, "", None)),
    ("region", "not empty", None, lambda c: meta(c, "region") not in (MISSING, "", None)),
    ("lang", "in", ["en", "mixed"], lambda c: meta(c, "lang") in ("en", "mixed")),
    ("lang", "in", "en, mixed", lambda c: meta(c, "lang") in ("en", "mixed")),
    ("lang", "not in", ["en", "mixed"], lambda c: meta(c, "lang") not in ("en", "mixed")),
    ("shop_id", "=", 101, lambda c: compare(meta(c, "shop_id"), eq, 101.0)),
    ("shop_id", "=", "101", lambda c: compare(meta(c, "shop_id"), eq, 101.0)),
    ("shop_id", "≠", 101, lambda c: not compare(meta(c, "shop_id"), eq, 101.0)),
    ("shop_id", ">", 101, lambda c: compare(meta(c, "shop_id"), gt, 101.0)),
    ("shop_id", "<", "102", lambda c: compare(meta(c, "shop_id"), lt, 102.0)),
    ("shop_id", "≥", 102, lambda c: compare(meta(c, "shop_id"), ge, 102.0)),
    ("shop_id", "≤", 101, lambda c: compare(meta(c, "shop_id"), le, 101.0)),
    ("region", "before", "D", lambda c: is_text(meta(c, "region")) and meta(c, "region") < "D"),
    ("region", "after", "D", lambda c: is_text(meta(c, "region")) and meta(c, "region") > "D"),
    ("tags", "contains", "faq", lambda c: "faq" in c.tags),
    ("tags", "not contains", "faq", lambda c: "faq" not in c.tags),
    ("tags", "is", "policy", lambda c: "policy" in c.tags),
    ("tags", "in", "faq,shipping", lambda c: bool({"faq", "shipping"} & set(c.tags))),
    ("tags", "not in", ["faq", "shipping"], lambda c: not {"faq", "shipping"} & set(c.tags)),
    ("doc_type", "is", "pdf", lambda c: c.doc_type == "pdf"),
    ("doc_type", "is not", "pdf", lambda c: c.doc_type != "pdf"),
    ("doc_type", "in", ["md", "html"], lambda c: c.doc_type in ("md", "html")),
    ("doc_type", "not in", ["md", "html"], lambda c: c.doc_type not in ("md", "html")),
]


@pytest.mark.parametrize(
    ("name", "operator", "value", "predicate"),
    OPERATOR_CASES,
    ids=[f"{name} {operator} {value!r}" for name, operator, value, _ in OPERATOR_CASES],
)
def test_every_comparison_operator_selects_what_dify_means(sample_kb, name, operator, value, predicate):
    chunks = list(Chunk.objects.filter(kb_version=sample_kb.active_version))
    expected = {chunk.pk for chunk in chunks if predicate(chunk)}
    assert expected and len(expected) < len(chunks), "the case must discriminate"
    for names in (name, [name]):
        clause = {"name": names, "comparison_operator": operator, "value": value}
        condition = {"logical_operator": "and", "conditions": [clause]}
        selected = compile_filters(filters_from_metadata_condition(condition)).apply(
            Chunk.objects.filter(kb_version=sample_kb.active_version)
        )
        assert set(selected.values_list("id", flat=True)) == expected


def test_every_dify_operator_is_covered():
    assert {operator for _, operator, _, _ in OPERATOR_CASES} == set(OPERATORS)


def test_dates_compare_with_created_at(sample_kb):
    chunks = list(Chunk.objects.filter(kb_version=sample_kb.active_version))
    moment = sorted(chunk.created_at for chunk in chunks)[len(chunks) // 2]
    for operator, value in (("before", moment.isoformat()), ("after", moment.timestamp())):
        condition = {"conditions": [{"name": "created_at", "comparison_operator": operator, "value": value}]}
        selected = compile_filters(filters_from_metadata_condition(condition)).apply(
            Chunk.objects.filter(kb_version=sample_kb.active_version)
        )
        wanted = {c.pk for c in chunks if (c.created_at < moment if operator == "before" else c.created_at > moment)}
        assert set(selected.values_list("id", flat=True)) == wanted


def test_conditions_combine_with_the_logical_operator_and_a_list_of_names_means_any():
    first = {"name": "lang", "comparison_operator": "is", "value": "en"}
    second = {"name": ["category", "region"], "comparison_operator": "is", "value": "policy"}
    assert filters_from_metadata_condition({"logical_operator": "or", "conditions": [first, second]}) == {
        "or": [{"metadata.lang": "en"}, {"or": [{"metadata.category": "policy"}, {"metadata.region": "policy"}]}]
    }
    assert filters_from_metadata_condition({"logical_operator": None, "conditions": [first]}) == {
        "and": [{"metadata.lang": "en"}]
    }
    assert filters_from_metadata_condition(None) is None
    assert filters_from_metadata_condition({"conditions": []}) is None


def test_an_operator_a_field_cannot_take_names_both():
    condition = {"conditions": [{"name": "created_at", "comparison_operator": "contains", "value": "2026"}]}
    with pytest.raises(InvalidFilter, match="'contains'.*'created_at'"):
        filters_from_metadata_condition(condition)
