"""``PgVectorIndex`` against real pgvector: a search sees only its tenant's listed versions of its
dimension, an empty scope or filter finds nothing, and similarities of given chunks stay in scope (the
rows, queries and plan checks: pgvector_rows.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines.base import SearchScope
from engines.pgvector_index import PgVectorIndex
from knowledge.models import KnowledgeBaseVersion
from retrieval.filters import compile_filters
from tests.engines.pgvector_rows import (
    CHUNKS,
    NO_FILTER,
    add_chunks,
    assert_same_ranking,
    brute_force,
    fresh_query,
    hnsw_search,
    scope_of,
)
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory, unit_vector

pytestmark = pytest.mark.django_db


# --- tenant isolation ----------------------------------------------------------------------------

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

ISOLATION_FILTERS = [
    None,
    {"doc_type": "pdf"},
    {"doc_type": {"in": ["pdf", "txt"]}},
    {"doc_type": {"ne": "docx"}},
    {"doc_id": {"nin": [-1]}},
    {"metadata.shop_id": 7},
    {"metadata.shop_id": {"gte": 7}},
    {"metadata.shop_id": {"exists": True}},
    {"metadata.shop_id": {"nin": [1]}},
    {"tags": "faq"},
    {"tags": {"any": ["faq", "x"]}},
    {"created_at": {"gte": "2025-12-31"}},
    {"created_at": {"lt": "2027-01-01T00:00:00"}},
    {"or": [{"doc_type": "docx"}, {"metadata.shop_id": 7}]},
    {"or": [{"tags": "faq"}, {"not": {"doc_type": "pdf"}}]},
    {"not": {"doc_type": "docx"}},
    {"not": {"metadata.shop_id": 1}},
    {"and": [{"not": {"tags": "nope"}}, {"or": [{"created_at": {"gt": "2000-01-01"}}, {"doc_id": -1}]}]},
]


@pytest.fixture
def two_tenants(db):
    """Tenants A and B with identical business fields; B's vectors equal the query (distance 0)."""
    query = fresh_query()
    kb_a, kb_b = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    assert kb_a.tenant_id != kb_b.tenant_id
    rows = {}
    for name, kb, vectors in (
        ("A", kb_a, [unit_vector(seed) for seed in range(100, 130)]),
        ("B", kb_b, [query.copy() for _ in range(30)]),
    ):
        document = DocumentFactory(knowledge_base=kb, doc_type="pdf")
        rows[name] = add_chunks(document, vectors, doc_type="pdf", tags=["faq"], metadata={"shop_id": 7}, created_at=T0)
    return query, kb_a, kb_b, rows


@pytest.mark.parametrize("path", ["exact", "hnsw"])
@pytest.mark.parametrize("filters", ISOLATION_FILTERS, ids=[repr(f)[:70] for f in ISOLATION_FILTERS])
def test_a_tenant_never_sees_another_tenants_rows(two_tenants, filters, path):
    query, kb_a, kb_b, rows = two_tenants
    a_ids = {c.pk for c in rows["A"]}
    compiled = compile_filters(filters).sql
    scopes = [
        scope_of(kb_a),
        # A's scope naming B's version too: the tenant condition must still exclude B's rows.
        SearchScope(kb_a.tenant_id, (kb_a.active_version_id, kb_b.active_version_id), DIMENSION),
    ]
    for scope in scopes:
        if path == "exact":
            index = PgVectorIndex(CHUNKS, exact_scan_threshold=100_000)
            # Every A row matches each filter: all 30 come back, and nothing else.
            hits = index.search(scope, query, 50, compiled)
            assert {h.chunk_id for h in hits} == a_ids
            assert_same_ranking(hits, brute_force(rows["A"], query, 50))
        else:
            # A page smaller than A's rows, filled by the graph walk itself (no exact fallback), through
            # a graph whose nearest nodes to the query are all B's.
            index = PgVectorIndex(CHUNKS, exact_scan_threshold=5, ef_search=40)
            hits, steps, walked = hnsw_search(index, scope, query, 10, compiled)
            assert steps == ["on"] and walked
            assert len(hits) == 10 and {h.chunk_id for h in hits} <= a_ids
            true_score = dict(brute_force(rows["A"], query, 30))
            assert all(h.score == pytest.approx(true_score[h.chunk_id], abs=1e-5) for h in hits)
    # Sanity: B's rows are there for B, as the best possible match.
    b_hits = PgVectorIndex(CHUNKS, exact_scan_threshold=100_000).search(scope_of(kb_b), query, 5, compiled)
    assert len(b_hits) == 5 and {h.chunk_id for h in b_hits} <= {c.pk for c in rows["B"]}
    assert b_hits[0].score == pytest.approx(1.0, abs=1e-5)


def test_a_scope_listing_only_another_tenants_version_is_empty(two_tenants):
    query, kb_a, kb_b, _ = two_tenants
    scope = SearchScope(kb_a.tenant_id, (kb_b.active_version_id,), DIMENSION)
    for threshold in (100_000, 1):
        assert PgVectorIndex(CHUNKS, exact_scan_threshold=threshold).search(scope, query, 10, NO_FILTER) == []


# --- scope by version and dimension --------------------------------------------------------------


def test_only_listed_versions_and_the_scope_dimension_are_searched():
    query = fresh_query()
    kb = KnowledgeBaseFactory()
    kb_768 = KnowledgeBaseFactory(tenant=kb.tenant, embedding_dim=768)  # creates the 768-d HNSW index too
    v1 = kb.active_version
    v2 = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=2,
        status=KnowledgeBaseVersion.Status.BUILDING,
        embedding_model=kb.embedding_model,
        embedding_dim=DIMENSION,
        chunk_size=kb.chunk_size,
        chunk_overlap=0,
    )
    document = DocumentFactory(knowledge_base=kb)
    active = add_chunks(document, [unit_vector(seed) for seed in range(200, 240)])
    building = add_chunks(document, [query.copy() for _ in range(10)], version=v2)
    query_768 = fresh_query(768)
    other_dim = add_chunks(
        DocumentFactory(knowledge_base=kb_768), [unit_vector(seed, 768) for seed in range(10)], embedding_dim=768
    )
    # A 768-d row filed under the 384-d version: the dimension condition alone keeps it out.
    stray = add_chunks(document, [query_768 * 1.0], embedding_dim=768)

    exact, hnsw = (
        PgVectorIndex(CHUNKS, exact_scan_threshold=100_000),
        PgVectorIndex(CHUNKS, exact_scan_threshold=5, ef_search=40),
    )
    v2_excluded = SearchScope(kb.tenant_id, (v1.pk, kb_768.active_version_id), DIMENSION)
    assert_same_ranking(exact.search(v2_excluded, query, 100, NO_FILTER), brute_force(active, query, 100))
    hits, steps, walked = hnsw_search(hnsw, v2_excluded, query, 10, NO_FILTER)
    assert steps == ["on"] and walked
    assert len(hits) == 10 and {h.chunk_id for h in hits} <= {c.pk for c in active}

    # Listing v2 brings its rows in, first: they equal the query.
    hits = exact.search(SearchScope(kb.tenant_id, (v1.pk, v2.pk), DIMENSION), query, 100, NO_FILTER)
    assert {h.chunk_id for h in hits[:10]} == {c.pk for c in building}  # tied at distance 0
    assert all(h.score == pytest.approx(1.0, abs=1e-5) for h in hits[:10])
    assert_same_ranking(hits[10:], brute_force(active, query, 100))

    # The 768-d scope sees only 768-d rows of its listed versions (the stray one included).
    scope_768 = SearchScope(kb.tenant_id, (v1.pk, v2.pk, kb_768.active_version_id), 768)
    hits = exact.search(scope_768, query_768, 100, NO_FILTER)
    assert_same_ranking(hits, brute_force(other_dim + stray, query_768, 100))
    hits, steps, _ = hnsw_search(hnsw, scope_768, query_768, 5, NO_FILTER)
    assert steps == ["on"]
    assert len(hits) == 5 and {h.chunk_id for h in hits} <= {c.pk for c in other_dim + stray}
    assert hits[0].chunk_id == stray[0].pk


# --- empty results -------------------------------------------------------------------------------


def test_no_matching_rows_gives_an_empty_result():
    kb, empty_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    vectors = [unit_vector(seed) for seed in range(300, 320)]
    add_chunks(DocumentFactory(knowledge_base=kb), vectors, metadata={"shop_id": 1})
    query = fresh_query()
    for threshold in (100_000, 1):
        index = PgVectorIndex(CHUNKS, exact_scan_threshold=threshold)
        assert index.search(scope_of(kb), query, 10, compile_filters({"metadata.shop_id": 2}).sql) == []
        assert index.search(scope_of(kb), query, 10, compile_filters({"doc_type": "nope"}).sql) == []
        assert index.search(scope_of(empty_kb), query, 10, NO_FILTER) == []
        assert index.search(SearchScope(kb.tenant_id, (), DIMENSION), query, 10, NO_FILTER) == []
        # the same scope without the excluding filter is not empty
        assert len(index.search(scope_of(kb), query, 10, compile_filters({"metadata.shop_id": 1}).sql)) == 10


# --- similarities of given chunks ------------------------------------------------------------------


def test_similarities_score_the_given_chunks_as_the_search_does():
    kb = KnowledgeBaseFactory()
    chunks = add_chunks(DocumentFactory(knowledge_base=kb), [unit_vector(seed) * 2.5 for seed in range(400, 440)])
    query = fresh_query()
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=100_000)
    searched = {hit.chunk_id: hit for hit in index.search(scope_of(kb), query, 40, NO_FILTER)}
    wanted = [chunks[3].pk, chunks[17].pk, chunks[39].pk]
    hits = index.similarities(scope_of(kb), query, wanted)
    assert sorted(hit.chunk_id for hit in hits) == sorted(wanted)
    exact = dict(brute_force(chunks, query, 40))
    for hit in hits:
        assert hit.score == pytest.approx(exact[hit.chunk_id], abs=1e-5) == searched[hit.chunk_id].score
        assert hit.content_hash == searched[hit.chunk_id].content_hash
    assert index.similarities(scope_of(kb), query, []) == []


def test_similarities_leave_out_chunks_outside_the_scope(two_tenants):
    query, kb_a, kb_b, rows = two_tenants
    index = PgVectorIndex(CHUNKS)
    mixed = [rows["A"][0].pk, rows["B"][0].pk, rows["B"][1].pk]
    assert [hit.chunk_id for hit in index.similarities(scope_of(kb_a), query, mixed)] == [rows["A"][0].pk]
    other_dimension = SearchScope(kb_a.tenant_id, (kb_a.active_version_id,), 768)
    assert index.similarities(other_dimension, query, mixed) == []


def test_a_readers_check_finds_its_rows_by_tenant_and_acl_in_one_index():
    """The scope's tenant is compared as bigint, so the (tenant_id, acl) GIN index takes both: an int4
    literal would be a cross-type comparison that index cannot take, and the ACL check would read every
    tenant's rows its principals name (another tenant's public chunks, for any reader)."""
    kb = KnowledgeBaseFactory()
    add_chunks(DocumentFactory(knowledge_base=kb), [unit_vector(i) for i in range(3)], acl=[["group:a"]] * 3)
    index = PgVectorIndex(CHUNKS)
    with CaptureQueriesContext(connection) as captured:
        assert index.plan(scope_of(kb), compile_filters(None, ("*", "group:a")).sql) == 3
    (count,) = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT count(*)")]
    with connection.cursor() as cursor:
        # the test's few rows: the btree indexes would win; dropped in the test's transaction (rolled back)
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE '%%USING btree%%' "
            "AND indexname <> %s",
            [CHUNKS, f"{CHUNKS}_pkey"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {count}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on chunk_tenant_acl_gin" in plan, plan
    (condition,) = [line for line in plan.splitlines() if "Index Cond" in line]
    assert "tenant_id = " in condition and "acl &&" in condition, plan
