"""``PgVectorIndex`` against real pgvector: exactness, filtered HNSW fill-up and the choice between an
exact scan and the graph walk (scope and tenant isolation: test_pgvector_scope.py; the rows, queries and
plan checks: pgvector_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import pgvector_index
from engines.pgvector_index import PgVectorIndex
from retrieval.filters import compile_filters
from tests.engines.pgvector_rows import (
    CHUNKS,
    HNSW_INDEX,
    NO_FILTER,
    add_chunks,
    assert_same_ranking,
    brute_force,
    fresh_query,
    graph_walk_only,
    hnsw_search,
    plans,
    scope_of,
)
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory, unit_vector

pytestmark = pytest.mark.django_db


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
