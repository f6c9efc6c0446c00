"""``PgVectorIndex`` at the exact-scan / graph-walk boundary under each lever of issue 27 (the
iterative scan's order and budget, sizing the filter by count or by the planner's estimate): on either
side a filtered search returns exactly ``top_k`` matching rows, best first, with full-precision scores.

The rows, the query vectors and the plan checks are ``test_pgvector_index``'s (its module docstring
says why the graph-walk side disables the other plans)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines.pgvector_index import PgVectorIndex
from retrieval.filters import compile_filters
from tests.engines.test_pgvector_index import (
    CHUNKS,
    add_chunks,
    assert_same_ranking,
    big_kb,  # noqa: F401  # the module's rows (a fixture)
    brute_force,
    fresh_query,
    hnsw_search,
    plans,
    scope_of,
)
from tests.factories import DocumentFactory, KnowledgeBaseFactory, unit_vector

pytestmark = pytest.mark.django_db

TOP_K = 20
LEVERS = [
    pytest.param({}, id="defaults"),
    pytest.param({"iterative_scan": "strict_order"}, id="strict_order"),
    pytest.param({"filter_sizing": "estimate"}, id="estimate"),
    pytest.param({"iterative_scan": "strict_order", "filter_sizing": "estimate"}, id="strict_order+estimate"),
]


def boundary(kb, filters, **levers) -> int:
    """The filter's size as the engine sees it with these levers (a count, or the planner's estimate),
    with a limit far above it so neither is capped."""
    return PgVectorIndex(CHUNKS, exact_scan_threshold=10**6, **levers).plan(scope_of(kb), filters)


def assert_top_k_in_score_order(hits, matching_rows, query) -> None:
    assert len(hits) == TOP_K and len({hit.chunk_id for hit in hits}) == TOP_K
    assert {hit.chunk_id for hit in hits} <= {row.pk for row in matching_rows}
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    true_score = dict(brute_force(matching_rows, query, len(matching_rows)))
    for hit in hits:
        assert hit.score == pytest.approx(true_score[hit.chunk_id], abs=1e-5)


@pytest.mark.parametrize("levers", LEVERS)
def test_at_the_boundary_a_filtered_search_scans_exactly(big_kb, levers):  # noqa: F811
    kb, _, shop7, _ = big_kb
    filters, query = compile_filters({"metadata.shop_id": 7}).sql, fresh_query()
    size = boundary(kb, filters, **levers)
    if "filter_sizing" not in levers:
        assert size == len(shop7)
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=size, ef_search=40, **levers)
    with CaptureQueriesContext(connection) as ctx:
        hits = index.search(scope_of(kb), query, TOP_K, filters)
    assert plans(ctx.captured_queries) == ["off"]
    assert_same_ranking(hits, brute_force(shop7, query, TOP_K))
    assert_top_k_in_score_order(hits, shop7, query)


@pytest.mark.parametrize("levers", LEVERS)
def test_one_row_past_the_boundary_it_walks_the_graph(big_kb, levers):  # noqa: F811
    kb, _, shop7, _ = big_kb
    filters, query = compile_filters({"metadata.shop_id": 7}).sql, fresh_query()
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=boundary(kb, filters, **levers) - 1, ef_search=40, **levers)
    hits, steps, walked = hnsw_search(index, scope_of(kb), query, TOP_K, filters)
    assert steps == ["on"] and walked  # the iterative walk alone filled top_k
    assert_top_k_in_score_order(hits, shop7, query)


SPARSE_ROWS, SPARSE_EVERY = 2000, 133  # 15 matching rows: 0.75 %


@pytest.fixture(scope="module")
def sparse_kb(django_db_setup, django_db_blocker):
    """2,000 chunks, every 133rd with shop_id 7: a first graph pass of ef_search 20 meets a few of them,
    so filling top_k 10 needs the iterative scan to go on. Committed for the module, deleted after."""
    with django_db_blocker.unblock():
        kb = KnowledgeBaseFactory()
        try:
            metadata = [{"shop_id": 7 if i % SPARSE_EVERY == 0 else 1} for i in range(SPARSE_ROWS)]
            vectors = [unit_vector(50_000 + i) for i in range(SPARSE_ROWS)]
            chunks = add_chunks(DocumentFactory(knowledge_base=kb), vectors, metadata=metadata)
            with connection.cursor() as cursor:
                cursor.execute("VACUUM knowledge_chunk")
            yield kb, [c for c, m in zip(chunks, metadata) if m["shop_id"] == 7]
        finally:
            kb.tenant.delete()


@pytest.mark.parametrize("order", ["relaxed_order", "strict_order"])
def test_a_walk_stopped_by_its_scan_budget_is_redone_exactly(sparse_kb, order):
    """With pgvector's budget the walk alone fills top_k; with a budget of one tuple past its first
    pass it returns short, and the engine scans the matching rows exactly."""
    kb, shop7 = sparse_kb
    filters = compile_filters({"metadata.shop_id": 7}).sql
    for budget, expected_steps in ((20_000, ["on"]), (1, ["on", "off"])):
        query = fresh_query()
        index = PgVectorIndex(
            CHUNKS, exact_scan_threshold=5, ef_search=20, iterative_scan=order, max_scan_tuples=budget
        )
        hits, steps, walked_last = hnsw_search(index, scope_of(kb), query, 10, filters)
        assert steps == expected_steps and walked_last == (budget > 1)  # the fallback's scan is exact
        assert len(hits) == 10 and {hit.chunk_id for hit in hits} <= {row.pk for row in shop7}
        if budget == 1:
            assert_same_ranking(hits, brute_force(shop7, query, 10))


def test_the_planner_estimate_replaces_the_count(big_kb):  # noqa: F811
    """Sizing by estimate runs no count (an EXPLAIN instead) and is capped one past the limit as the count is."""
    kb, _, _, _ = big_kb
    filters = compile_filters({"metadata.shop_id": 7}).sql
    with CaptureQueriesContext(connection) as ctx:
        estimate = boundary(kb, filters, filter_sizing="estimate")
    assert estimate >= 1
    assert [q["sql"].startswith("EXPLAIN (FORMAT JSON)") for q in ctx.captured_queries] == [True]
    capped = PgVectorIndex(CHUNKS, exact_scan_threshold=0, filter_sizing="estimate").plan(scope_of(kb), filters)
    assert capped == 1
