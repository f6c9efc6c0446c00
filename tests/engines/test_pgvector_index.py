"""``PgVectorIndex`` against real pgvector: exactness, filtered HNSW fill-up, and scope isolation.

Expectations are brute-force numpy cosine rankings over row sets the tests built themselves (never
over rows selected by the code under test).

Two facts about the test database shape these tests:

* With a few thousand rows PostgreSQL prefers a sequential / bitmap scan plus a sort even when the
  search allows index scans, so the "HNSW path" would not walk the graph. ``graph_walk_only()``
  disables the alternatives around the searches meant to walk it, and the tests check the plan.
* Rolled-back tests leave their entries in the HNSW graph until VACUUM. Thousands of entries with one
  identical vector form a clique that the walk cannot leave, so each test uses its own query vector.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import re

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import pgvector_index
from engines.base import SearchScope
from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk, KnowledgeBaseVersion
from retrieval.filters import compile_filters
from tests.factories import DIMENSION, ChunkFactory, DocumentFactory, KnowledgeBaseFactory, unit_vector

pytestmark = pytest.mark.django_db

NO_FILTER = compile_filters(None).sql
CHUNKS = Chunk._meta.db_table
HNSW_INDEX = f"chunk_embedding_hnsw_{DIMENSION}"
_query_seeds = itertools.count(10_000_000)  # far from the factory's sequence seeds


def fresh_query(dimension: int = DIMENSION) -> np.ndarray:
    return unit_vector(next(_query_seeds), dimension)


def scope_of(kb, *versions, dim: int = DIMENSION) -> SearchScope:
    version_ids = tuple(v.pk for v in versions) or (kb.active_version_id,)
    return SearchScope(tenant_id=kb.tenant_id, version_ids=version_ids, embedding_dim=dim)


def add_chunks(document, vectors, *, version=None, **fields) -> list[Chunk]:
    """Bulk-insert one chunk per vector; a list value (except ``tags``) gives one value per row."""
    chunks = []
    for i, vector in enumerate(vectors):
        row = {k: (v[i] if isinstance(v, list) and k != "tags" else v) for k, v in fields.items()}
        if version is not None:
            row["kb_version"] = version
        chunks.append(ChunkFactory.build(document=document, embedding=np.asarray(vector, dtype=np.float32), **row))
    return Chunk.objects.bulk_create(chunks)


def brute_force(chunks, query, top_k: int) -> list[tuple[int, float]]:
    """Top-k (id, cosine similarity) by exact numpy cosine over exactly these rows."""
    if not chunks:
        return []
    ids = np.array([c.pk for c in chunks])
    matrix = np.stack([np.asarray(c.embedding, dtype=np.float64) for c in chunks])
    q = np.asarray(query, dtype=np.float64)
    similarity = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    order = np.argsort(-similarity, kind="stable")[:top_k]
    return [(int(ids[i]), float(similarity[i])) for i in order]


def assert_same_ranking(hits, expected):
    assert [h.chunk_id for h in hits] == [chunk_id for chunk_id, _ in expected]
    for hit, (_, score) in zip(hits, expected):
        assert hit.score == pytest.approx(score, abs=1e-5)


def plans(queries) -> list[str]:
    """The enable_indexscan value each nearest-neighbour query of a search ran under, in order ('off' =
    exact scan, 'on' = HNSW allowed). The settings travel with the query in one round trip; inside a
    transaction (as in these tests) the same round trip puts 'on' back."""
    values = []
    for query in queries:
        if "<=>" in query["sql"]:
            chosen, restored = re.findall(r"set_config\('enable_indexscan', '(on|off)', true\)", query["sql"])
            assert restored == "on", "a search must leave index scans enabled"
            values.append(chosen)
    return values


def nearest_neighbour_statement(sql: str) -> str:
    return next(statement for statement in sql.split("; ") if "<=>" in statement)


@contextlib.contextmanager
def graph_walk_only():
    """Around an HNSW-path search: no sequential or bitmap scan and no sort, so an ordered index scan
    (HNSW) is the only undisabled plan. Never around an exact search (it would steer that to HNSW)."""

    def set_all(value):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('enable_seqscan', %s, true), set_config('enable_bitmapscan', %s, true),"
                " set_config('enable_sort', %s, true)",
                [value] * 3,
            )

    set_all("off")
    try:
        yield
    finally:
        set_all("on")


def walked_the_graph(queries) -> bool:
    """Whether the last nearest-neighbour query the search ran plans as an HNSW index scan."""
    sql = nearest_neighbour_statement([q["sql"] for q in queries if "<=>" in q["sql"]][-1])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),"
            " set_config('enable_sort', 'off', true)"
        )
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(
            "SELECT set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),"
            " set_config('enable_sort', 'on', true)"
        )
    return f"Index Scan using {HNSW_INDEX}" in plan


def hnsw_search(index, scope, query, top_k, filters):
    """Search expected to take the HNSW path; returns (hits, plans, walked the graph)."""
    with CaptureQueriesContext(connection) as ctx, graph_walk_only():
        hits = index.search(scope, query, top_k, filters)
    return hits, plans(ctx.captured_queries), walked_the_graph(ctx.captured_queries)


# --- exact path ----------------------------------------------------------------------------------


def test_exact_path_equals_brute_force_cosine():
    kb = KnowledgeBaseFactory()
    rng = np.random.default_rng(1)
    # Random norms: a ranking by inner product would differ from the cosine ranking.
    vectors = [unit_vector(seed) * rng.uniform(0.2, 5.0) for seed in range(200)]
    chunks = add_chunks(DocumentFactory(knowledge_base=kb), vectors)
    query = fresh_query() * 3.0
    expected = brute_force(chunks, query, 25)
    by_dot = sorted(chunks, key=lambda c: -float(np.dot(c.embedding, query)))[:25]
    assert [c.pk for c in by_dot] != [i for i, _ in expected]  # the test tells cosine from inner product

    index = PgVectorIndex(CHUNKS, exact_scan_threshold=100_000, ef_search=40)
    with CaptureQueriesContext(connection) as ctx:
        hits = index.search(scope_of(kb), query, 25, NO_FILTER)
    assert plans(ctx.captured_queries) == ["off"]
    assert_same_ranking(hits, expected)

    # top_k larger than the scope returns every row, still ranked.
    assert_same_ranking(index.search(scope_of(kb), query, 500, NO_FILTER), brute_force(chunks, query, 500))


@pytest.mark.django_db(transaction=True)
def test_in_autocommit_a_search_is_one_round_trip_whose_settings_end_with_it():
    """How the service searches (no transaction open): the planner settings and the query travel as one
    statement string, and neither the exact scan's enable_indexscan=off nor ef_search outlives it."""
    kb = KnowledgeBaseFactory()
    chunks = add_chunks(DocumentFactory(knowledge_base=kb), [unit_vector(seed) for seed in range(50)])
    index, query = PgVectorIndex(CHUNKS, exact_scan_threshold=100_000, ef_search=64), fresh_query()
    index.search(scope_of(kb), query, 10, NO_FILTER)  # registers the vector type on this connection
    assert not connection.in_atomic_block
    with CaptureQueriesContext(connection) as ctx:
        hits = index.search(scope_of(kb), query, 10, NO_FILTER, plan=len(chunks))
    assert len(ctx.captured_queries) == 1 and "'off'" in ctx.captured_queries[0]["sql"]
    assert_same_ranking(hits, brute_force(chunks, query, 10))
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_indexscan'), current_setting('hnsw.ef_search')")
        assert cursor.fetchone() == ("on", "40")  # the server's defaults, not the search's off / 64


def test_exact_path_with_filter_equals_brute_force_over_matching_rows():
    kb = KnowledgeBaseFactory()
    doc_types = ["pdf" if i % 3 == 0 else "txt" for i in range(300)]
    chunks = add_chunks(DocumentFactory(knowledge_base=kb), [unit_vector(s) for s in range(300)], doc_type=doc_types)
    query = fresh_query()
    pdf = [c for c, t in zip(chunks, doc_types) if t == "pdf"]
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=100_000)
    hits = index.search(scope_of(kb), query, 15, compile_filters({"doc_type": "pdf"}).sql)
    assert_same_ranking(hits, brute_force(pdf, query, 15))


# --- filtered HNSW fill-up -----------------------------------------------------------------------

FILL_ROWS = 1500


@pytest.fixture(scope="module")
def big_kb(django_db_setup, django_db_blocker):
    """1500 chunks in one KB; every 33rd (about 3 %) has shop_id 7, five have shop_id 99.

    Built once for the module (the HNSW inserts take ~2 s) and committed, so deleted at the end.
    """
    with django_db_blocker.unblock():
        kb = KnowledgeBaseFactory()
        try:
            shop7 = {i for i in range(FILL_ROWS) if i % 33 == 5}
            rare = {i for i in range(FILL_ROWS) if i % 300 == 17}
            metadata = [
                {"shop_id": 7} if i in shop7 else {"shop_id": 99} if i in rare else {"shop_id": i % 5}
                for i in range(FILL_ROWS)
            ]
            vectors = [unit_vector(seed) for seed in range(FILL_ROWS)]
            chunks = add_chunks(DocumentFactory(knowledge_base=kb), vectors, metadata=metadata)
            # Rolled-back rows of earlier tests stay in the HNSW graph until vacuumed, and a graph
            # crowded with dead entries walks worse than the one a live service has. VACUUM skips the
            # index when nothing is dead (the module run alone), so ANALYZE counts its rows (reltuples).
            with connection.cursor() as cursor:
                cursor.execute("VACUUM knowledge_chunk")
                cursor.execute("ANALYZE knowledge_chunk")
            assert len(rare) == 5 and 40 <= len(shop7) <= 50
            yield kb, chunks, [chunks[i] for i in sorted(shop7)], [chunks[i] for i in sorted(rare)]
        finally:
            kb.tenant.delete()


@pytest.mark.parametrize("attempt", range(3))
def test_filtered_hnsw_search_fills_top_k_with_matching_rows(big_kb, attempt):
    kb, _, shop7, _ = big_kb
    query = fresh_query()
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=10, ef_search=40)
    hits, steps, walked = hnsw_search(index, scope_of(kb), query, 20, compile_filters({"metadata.shop_id": 7}).sql)
    # One graph walk and no exact fallback: the iterative scan went on past ef_search=40 candidates
    # (about one of which passes a 3 % filter) until 20 matching rows were found.
    assert steps == ["on"] and walked

    assert len(hits) == 20
    assert len({h.chunk_id for h in hits}) == 20
    assert {h.chunk_id for h in hits} <= {c.pk for c in shop7}
    expected = brute_force(shop7, query, 20)
    recall = len({h.chunk_id for h in hits} & {i for i, _ in expected}) / 20
    assert recall >= 0.9
    # Best first, with true cosine scores.
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    true_score = dict(brute_force(shop7, query, len(shop7)))
    for hit in hits:
        assert hit.score == pytest.approx(true_score[hit.chunk_id], abs=1e-5)


def test_unfiltered_hnsw_search_recall(big_kb):
    """Random 384-d vectors are HNSW's hardest case: judge recall on average over ten queries."""
    kb, chunks, _, _ = big_kb
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=10, ef_search=100)
    recalls = []
    for _ in range(10):
        query = fresh_query()
        hits, steps, walked = hnsw_search(index, scope_of(kb), query, 10, NO_FILTER)
        assert steps == ["on"] and walked
        assert len(hits) == 10
        expected = {i for i, _ in brute_force(chunks, query, 10)}
        recalls.append(len({h.chunk_id for h in hits} & expected) / 10)
    assert sum(recalls) / len(recalls) >= 0.85, recalls


def test_a_list_deeper_than_pgvectors_ef_search_limit_is_walked_to_its_depth(big_kb):
    """Twice 600 candidates is above pgvector's ef_search limit (1000): the setting stops there and the
    iterative scan still returns every row asked for."""
    kb, chunks, _, _ = big_kb
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=10, ef_search=40)
    hits, steps, walked = hnsw_search(index, scope_of(kb), fresh_query(), 600, NO_FILTER)
    assert steps == ["on"] and walked
    assert len({hit.chunk_id for hit in hits}) == 600


@pytest.mark.parametrize("threshold", [2, 10])  # 2: HNSW path (5 > 2); 10: exact path
def test_filter_matching_fewer_rows_than_top_k_returns_them_all(big_kb, threshold):
    kb, _, _, rare = big_kb
    query = fresh_query()
    with CaptureQueriesContext(connection) as ctx:
        hits = PgVectorIndex(CHUNKS, exact_scan_threshold=threshold, ef_search=40).search(
            scope_of(kb), query, 20, compile_filters({"metadata.shop_id": 99}).sql
        )
    assert plans(ctx.captured_queries)[0] == ("on" if threshold < 5 else "off")
    assert len(hits) == 5
    assert_same_ranking(hits, brute_force(rare, query, 20))


def test_hnsw_path_falls_back_to_exact_when_the_walk_finds_too_few(big_kb):
    """Five matching rows, top_k 20, graph walk forced: whatever the walk finds, the answer is exact."""
    kb, _, _, rare = big_kb
    query = fresh_query()
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=2, ef_search=40)
    with CaptureQueriesContext(connection) as ctx, graph_walk_only():
        hits = index.search(scope_of(kb), query, 20, compile_filters({"metadata.shop_id": 99}).sql)
    assert plans(ctx.captured_queries) == ["on", "off"]  # the HNSW attempt, then the exact retry
    assert_same_ranking(hits, brute_force(rare, query, 20))


# --- the threshold decision ----------------------------------------------------------------------


def test_threshold_decides_between_exact_and_hnsw(big_kb):
    kb, _, shop7, rare = big_kb
    query = fresh_query()
    matching = len(shop7)
    shop7_filter = compile_filters({"metadata.shop_id": 7}).sql

    # matching == threshold: exact, equal to brute force in order and score.
    with CaptureQueriesContext(connection) as ctx:
        hits = PgVectorIndex(CHUNKS, exact_scan_threshold=matching, ef_search=40).search(
            scope_of(kb), query, 20, shop7_filter
        )
    assert plans(ctx.captured_queries) == ["off"]
    assert_same_ranking(hits, brute_force(shop7, query, 20))

    # matching < threshold: exact too.
    hits = PgVectorIndex(CHUNKS, exact_scan_threshold=matching + 500).search(scope_of(kb), query, 30, shop7_filter)
    assert_same_ranking(hits, brute_force(shop7, query, 30))

    # matching == threshold + 1: the HNSW path.
    hits, steps, walked = hnsw_search(
        PgVectorIndex(CHUNKS, exact_scan_threshold=matching - 1, ef_search=40), scope_of(kb), query, 20, shop7_filter
    )
    assert steps == ["on"] and walked
    assert len(hits) == 20 and {h.chunk_id for h in hits} <= {c.pk for c in shop7}

    # A selective filter below the threshold in a scope far above it: exact.
    with CaptureQueriesContext(connection) as ctx:
        hits = PgVectorIndex(CHUNKS, exact_scan_threshold=5, ef_search=40).search(
            scope_of(kb), query, 3, compile_filters({"metadata.shop_id": 99}).sql
        )
    assert plans(ctx.captured_queries) == ["off"]
    assert_same_ranking(hits, brute_force(rare, query, 3))


def service_plan(queries) -> str:
    """EXPLAIN of the first nearest-neighbour query a search ran, under the planner settings it ran with
    (they travel in its round trip, with a third statement that restores them)."""
    settings_, query, restore = [q["sql"] for q in queries if "<=>" in q["sql"]][0].split("; ")
    with connection.cursor() as cursor:
        cursor.execute(settings_)
        cursor.execute("EXPLAIN " + query)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(restore)
    return plan


def test_above_the_limit_the_planner_is_steered_to_the_graph_walk(big_kb):
    """Left free with a few thousand rows, PostgreSQL sorts the filtered rows (at 300k rows it sorted
    30,000 of them in 1.8 s where the walk took a tenth); above the limit the engine walks the graph."""
    kb, _, shop7, _ = big_kb
    with CaptureQueriesContext(connection) as ctx:
        hits = PgVectorIndex(CHUNKS, exact_scan_threshold=10, ef_search=40).search(
            scope_of(kb), fresh_query(), 10, compile_filters({"metadata.shop_id": 7}).sql
        )
    assert plans(ctx.captured_queries)[0] == "on"
    assert f"Index Scan using {HNSW_INDEX}" in service_plan(ctx.captured_queries)
    assert len(hits) == 10 and {h.chunk_id for h in hits} <= {c.pk for c in shop7}


def test_the_exact_scan_limit_grows_with_the_square_root_of_the_index(big_kb, monkeypatch):
    """The same filtered search walks the graph while the index is at the reference size and scans
    exactly once the index is (here, by a smaller reference) 15 or more times larger: the limit is the
    threshold times the square root of that ratio."""
    kb, _, shop7, _ = big_kb
    query, shop7_filter = fresh_query(), compile_filters({"metadata.shop_id": 7}).sql
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=len(shop7) // 3, ef_search=40)
    pgvector_index._rows_in_index.cache_clear()
    index_rows = pgvector_index._rows_in_index(DIMENSION)
    assert index_rows >= len(big_kb[1])  # the module's rows, as the fixture's ANALYZE counted them
    monkeypatch.setattr(pgvector_index, "EXACT_SCAN_REFERENCE_ROWS", index_rows)
    with CaptureQueriesContext(connection) as ctx:
        index.search(scope_of(kb), query, 20, shop7_filter)
    assert plans(ctx.captured_queries)[0] == "on"  # 3x the threshold matches: walk

    monkeypatch.setattr(pgvector_index, "EXACT_SCAN_REFERENCE_ROWS", index_rows // 15)
    assert pgvector_index.exact_scan_limit(index.exact_scan_threshold, index_rows) >= len(shop7)
    with CaptureQueriesContext(connection) as ctx:
        hits = index.search(scope_of(kb), query, 20, shop7_filter)
    assert plans(ctx.captured_queries) == ["off"]
    assert_same_ranking(hits, brute_force(shop7, query, 20))


def test_a_plan_made_while_the_query_embeds_spares_the_search_its_count(big_kb):
    kb, _, shop7, _ = big_kb
    query = fresh_query()
    shop7_filter = compile_filters({"metadata.shop_id": 7}).sql
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=len(shop7) + 5)
    assert index.plan(scope_of(kb), shop7_filter) == len(shop7)  # below the threshold: exact
    assert PgVectorIndex(CHUNKS, exact_scan_threshold=10).plan(scope_of(kb), shop7_filter) == 11  # counting stops there

    plan = index.plan(scope_of(kb), shop7_filter)
    with CaptureQueriesContext(connection) as ctx:
        hits = index.search(scope_of(kb), query, 20, shop7_filter, plan)
    assert not [q for q in ctx.captured_queries if "COUNT(" in q["sql"].upper()]
    assert plans(ctx.captured_queries) == ["off"]
    assert_same_ranking(hits, brute_force(shop7, query, 20))
    # A plan saying the scope is empty ends the search before any vector query.
    with CaptureQueriesContext(connection) as ctx:
        assert index.search(scope_of(kb), query, 20, shop7_filter, 0) == []
    assert ctx.captured_queries == []


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
