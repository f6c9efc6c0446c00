"""Dify's External Knowledge API (``retrieval.dify``): Dify's documented request shapes replayed against the
sample knowledge base, Dify's answer and error shapes, scores, and every comparison operator of
``metadata_condition`` checked against the rows it selects."""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import eq, ge, gt, le, lt
from pathlib import Path
from typing import Any

import pytest

from engines import get_lexical_index
from knowledge.models import Chunk, Document
from knowledge.selectors.search import analyzer_for_tenant
from retrieval import tuning
from retrieval.dify import OPERATORS, filters_from_metadata_condition
from retrieval.errors import InvalidFilter
from retrieval.filters import compile_filters
from retrieval.relevance import lexical_relevance
from retrieval.relevance_calibration import calibrated
from tenants.models import RateTier
from tenants.services import create_api_key, revoke_api_key
from tests.conftest import client_for, client_with_key, corrupt_keyword_index
from tests.factories import KnowledgeBaseFactory, TenantFactory
from tests.retrieval.api_corpus import ingest, write_files
from tests.retrieval.conftest import DifyClient, DifyRefused, MaxRetriesExceeded, dify_citations

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

URL = "/api/v1/dify/retrieval"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dify"
MISSING = object()


def fixture_bytes(name: str, knowledge_id: str | None = None) -> bytes:
    content = (FIXTURES / name).read_bytes()
    return content if knowledge_id is None else content.replace(b"{knowledge_id}", knowledge_id.encode())


def fixture(name: str, knowledge_id: str | None = None) -> dict:
    return json.loads(fixture_bytes(name, knowledge_id))


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
    """Same hits, same order as /hybrid; where relevance already falls down the fused order, each
    score is the hit's relevance, the search's own."""
    query = "shipping to Hong Kong"
    hits = hybrid_hits(dify, sample_kb, query, top_k=5)
    records = post(dify, dify_request(sample_kb, query, top_k=5)).json()["records"]
    assert [r["metadata"]["chunk_id"] for r in records] == [hit["chunk_id"] for hit in hits]
    assert [hit["relevance"] for hit in hits] == sorted((hit["relevance"] for hit in hits), reverse=True)
    assert [r["score"] for r in records] == [hit["relevance"] for hit in hits]
    assert [r["content"] for r in records] == [hit["content"] for hit in hits]


@pytest.mark.parametrize("fusion", ["rrf", "relevance", "minmax"])
def test_dify_sorting_by_score_keeps_the_fused_order(dify, sample_kb, monkeypatch, fusion):
    """Dify re-sorts records by score: each score is its relevance raised to the best relevance ranked
    below it, whatever the default fusion (these queries' relevance rises somewhere down the fused list)."""
    monkeypatch.setattr(tuning, "DEFAULT_FUSION", fusion)
    raised = 0
    for query in ("How do I return an item for a refund?", "return policy", "how long does shipping take"):
        hits = hybrid_hits(dify, sample_kb, query, top_k=10)
        records = post(dify, dify_request(sample_kb, query, top_k=10)).json()["records"]
        assert [r["metadata"]["chunk_id"] for r in records] == [hit["chunk_id"] for hit in hits]
        resorted = sorted(records, key=lambda r: float(r["score"]), reverse=True)  # Dify's sort, stable
        assert resorted == records, query
        relevance = [hit["relevance"] for hit in hits]
        assert [r["score"] for r in records] == [max(relevance[i:]) for i in range(len(relevance))]
        raised += sum(r["score"] > hit["relevance"] for r, hit in zip(records, hits))
    assert raised, "the case must discriminate: some relevance rises down the fused order"


def test_score_threshold_drops_hits_whose_relevance_is_lower(dify, sample_kb):
    query = "How do I return an item for a refund?"
    hits = hybrid_hits(dify, sample_kb, query, top_k=10)
    relevance = sorted({hit["relevance"] for hit in hits})
    assert len(relevance) > 1
    threshold = relevance[len(relevance) // 2]
    request = dify_request(sample_kb, query, top_k=10)
    request["retrieval_setting"]["score_threshold"] = threshold
    kept = post(dify, request).json()["records"]
    assert [r["metadata"]["chunk_id"] for r in kept] == [h["chunk_id"] for h in hits if h["relevance"] >= threshold]
    assert all(record["score"] >= threshold for record in kept)
    request["retrieval_setting"]["score_threshold"] = max(relevance) + 1e-6
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
    expected = [round(calibrated(lexical_relevance(hit["retrievers"]["bm25"]["score"], ceiling)), 6) for hit in hits]
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
        {"metadata_condition": {"logical_operator": "and", "conditions": [None]}},
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


# --- Dify's client, replayed: its bytes, its retries, its reading of the answer ----------------------

IN_PROCESS = "http://testserver/api/v1/dify"


def chunk_ids(records: list[dict]) -> list[int]:
    return [record["metadata"]["chunk_id"] for record in records]


@pytest.fixture
def sample_key(sample_kb) -> str:
    return create_api_key(tenant=sample_kb.tenant).raw_key


@pytest.mark.parametrize("endpoint", [IN_PROCESS, f"{IN_PROCESS}/"], ids=["endpoint", "endpoint with a slash"])
@pytest.mark.parametrize("body_less", [False, True], ids=["probe", "body-less probe (before Dify 1.x)"])
def test_dify_registers_the_endpoint_and_refuses_a_bad_key(sample_kb, sample_key, in_process, endpoint, body_less):
    dify = DifyClient(endpoint, sample_key, in_process)
    response = dify.register(body_less=body_less)
    assert (response.status_code, response.json()) == (200, {"records": []})  # answered as a probe, not a 400
    assert len(dify.attempts) == 1
    with pytest.raises(DifyRefused, match="403"):
        DifyClient(endpoint, "rk_not_a_key", in_process).register(body_less=body_less)
    # The endpoint Dify registered serves its searches.
    body = fixture_bytes("dify_no_condition.json", str(sample_kb.pk))
    assert DifyClient(endpoint, sample_key, in_process).retrieve(body)


def test_only_the_probe_itself_is_answered_as_one(dify, sample_kb):
    probe = fixture("dify_probe.json")
    assert_dify_error(post(dify, {**probe, "knowledge_id": str(sample_kb.pk)}), 400, 400)  # a search, blank query
    assert_dify_error(post(dify, {**probe, "query": "battery"}), 404, 2001)  # a search of no knowledge base


@pytest.mark.parametrize(
    "name",
    ["dify_no_condition.json", "dify_conditions_null.json", "dify_all_operators.json", "dify_console_quotes.json"],
)
def test_the_bodies_dify_sends_get_records_dify_reads(dify, sample_kb, sample_key, in_process, name):
    """Null condition, null conditions, every operator (or-ed with their complements: no passage is
    excluded), and a console query with quotes and escaped quotes: as Dify's ``json.dumps`` wrote them."""
    body = fixture_bytes(name, str(sample_kb.pk))
    records = DifyClient(IN_PROCESS, sample_key, in_process).retrieve(body)
    request = json.loads(body)
    setting = request["retrieval_setting"]
    assert 0 < len(records) <= setting["top_k"]
    assert all(float(record["score"]) >= setting["score_threshold"] for record in records)
    unfiltered = hybrid_hits(dify, sample_kb, request["query"], top_k=setting["top_k"])
    kept = [hit for hit in unfiltered if hit["relevance"] >= setting["score_threshold"]]
    if name != "dify_console_quotes.json":  # its condition may drop a passage
        assert chunk_ids(records) == [hit["chunk_id"] for hit in kept]


def test_missing_conditions_mean_no_filter(dify, sample_kb):
    request = {**dify_request(sample_kb, "return policy", top_k=5), "metadata_condition": {"logical_operator": "and"}}
    records = post(dify, request).json()["records"]
    assert chunk_ids(records) == [hit["chunk_id"] for hit in hybrid_hits(dify, sample_kb, "return policy", top_k=5)]


def test_conditions_without_a_value_are_skipped_and_said_so(sample_kb, sample_key, in_process):
    """Dify's manual filter sends ``value: null`` for a blank field; its own knowledge bases skip the condition."""
    dify = DifyClient(IN_PROCESS, sample_key, in_process)
    records = dify.retrieve(fixture_bytes("dify_blank_values.json", str(sample_kb.pk)))
    assert records
    assert all(r["metadata"]["lang"] == "en" and r["metadata"].get("region") not in (None, "") for r in records)
    notes = dify.attempts[-1].json()["notes"]
    assert [note.split(" ", 1)[0] for note in notes] == [f"metadata_condition.conditions[{i}]" for i in (0, 2, 3, 4)]
    assert all(note.endswith("has no value: skipped") for note in notes)


def test_a_condition_without_a_value_builds_no_clause():
    blank = {"name": "category", "comparison_operator": "is", "value": None}
    valued = {"name": "lang", "comparison_operator": "is", "value": "en"}
    assert filters_from_metadata_condition({"logical_operator": "or", "conditions": [blank, valued]}) == {
        "or": [{"metadata.lang": "en"}]
    }
    assert filters_from_metadata_condition({"logical_operator": "and", "conditions": [blank]}) is None
    assert filters_from_metadata_condition({"logical_operator": "and", "conditions": None}) is None


@pytest.fixture
def limited_tenant(tenant):
    tenant.rate_tier = RateTier.objects.create(
        name=f"dify-{tenant.pk}", requests_per_window=1000, endpoint_limits={"hybrid": 10}
    )
    tenant.save()
    return tenant


def test_the_same_call_again_is_counted_once_up_to_difys_three_retries(sample_kb, limited_tenant):
    kb = KnowledgeBaseFactory(tenant=limited_tenant)
    key = create_api_key(tenant=limited_tenant).raw_key
    body = json.dumps(dify_request(kb, "battery", top_k=1))

    def remaining(raw_key: str, content: str) -> int:
        response = client_with_key(raw_key).post(URL, data=content, content_type="application/json")
        return int(response["X-RateLimit-Remaining"])

    assert [remaining(key, body) for _ in range(5)] == [9, 9, 9, 9, 8]  # the fifth is not a retry of Dify's
    assert remaining(key, body.replace("battery", "charger")) == 7  # another body
    assert remaining(create_api_key(tenant=limited_tenant).raw_key, body) == 6  # another key


def test_difys_retries_of_a_failing_call_count_once(tmp_path, limited_tenant, embedder, settings, in_process):
    """Dify's schedule (0.5, 1, 2 s) on a 503: four attempts, one counted; Dify shows its own error."""
    folder = write_files(tmp_path / "kb", {"kettle.txt": ("电水壶 The kettle boils water.", None)})
    kb = ingest(folder, limited_tenant, "kb")
    corrupt_keyword_index(settings.LEXICAL_INDEX_DIR, kb.active_version_id)  # a Chinese query: BM25 is the sole leg
    key = create_api_key(tenant=limited_tenant).raw_key
    dify = DifyClient(IN_PROCESS, key, in_process)
    body = json.dumps({**dify_request(kb, "电水壶烧水", top_k=3), "metadata_condition": None}).encode()
    with pytest.raises(MaxRetriesExceeded):
        dify.retrieve(body)
    assert [(attempt.status_code, attempt.headers["X-RateLimit-Remaining"]) for attempt in dify.attempts] == [
        (503, "9")
    ] * 4
    after = client_with_key(key).post(URL, dify_request(kb, "kettle", top_k=1), format="json")
    assert after["X-RateLimit-Remaining"] == "8"


@pytest.mark.django_db(transaction=True)
def test_dify_over_a_real_socket_registers_retrieves_and_cites_each_document(live_server, tmp_path, embedder):
    """Two documents with one title stay two citations: Dify keys them by ``metadata.document_id``."""
    tenant = TenantFactory()
    same_title = {"title": "Kettle care"}
    files = {
        "kettle-a.txt": ("The PPR-1 kettle: descale it monthly with citric acid.", same_title),
        "kettle-b.txt": ("The PPR-2 kettle: descale it weekly with white vinegar.", same_title),
    }
    kb = ingest(write_files(tmp_path / "kettles", files), tenant, "kettles")
    key = create_api_key(tenant=tenant).raw_key
    body = {"retrieval_setting": {"top_k": 2, "score_threshold": 0.0}, "query": "How do I descale the kettle?",
            "knowledge_id": str(kb.pk), "metadata_condition": None}  # fmt: skip
    for endpoint in (f"{live_server.url}/api/v1/dify", f"{live_server.url}/api/v1/dify/"):
        dify = DifyClient(endpoint, key)
        assert dify.register().json() == dify.register(body_less=True).json() == {"records": []}
        citations = dify_citations(dify.retrieve(json.dumps(body).encode()))
        documents = {str(document.pk) for document in Document.objects.filter(knowledge_base=kb)}
        assert sorted(citation["document_id"] for citation in citations) == sorted(documents)
        assert {citation["document_name"] for citation in citations} == {"Kettle care"}
        for citation in citations:
            assert {"path", "source", "doc_id", "chunk_id", "kb_id", "doc_type"} <= set(citation["doc_metadata"])
            assert citation["document_id"] == str(citation["doc_metadata"]["doc_id"])


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
