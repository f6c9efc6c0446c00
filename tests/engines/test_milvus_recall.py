"""Milvus (Milvus Lite) against exact numpy cosine on the clustered rows of test_hnsw_parameters.py.

Recall@10 of the walk, unfiltered and with a 10 % metadata filter applied inside Milvus (the exact-scan
limit set to 0, so that every search walks): a small collection, which Milvus may search partly exactly,
so this proves the search path (scope, filter, order), not the graph's recall at size
(docs/BENCHMARKS.md, "Milvus against pgvector"). Then the line between the walk and the scopes Milvus
is not asked about: those under the exact-scan limit, scanned exactly in PostgreSQL."""

from __future__ import annotations

import pytest

from engines.milvus_index import MilvusVectorIndex, VectorIndexError
from knowledge.models import Chunk
from knowledge.stores import chunk_rows_of
from retrieval.filters import compile_filters
from retrieval.keyword_filter import exact_field_filter
from tests.engines.pgvector_rows import CHUNKS, assert_same_ranking, brute_force, scope_of
from tests.engines.test_hnsw_parameters import clustered_kb  # noqa: F401 (3,000 clustered chunks)

pytestmark = pytest.mark.django_db

UNREACHABLE = "http://127.0.0.1:1"  # nothing listens on port 1: a call to Milvus fails


@pytest.mark.parametrize("shop", [None, 1], ids=["unfiltered", "filtered 10 %"])
def test_milvus_recalls_at_least_095_against_exact(clustered_kb, settings, shop):  # noqa: F811
    kb, chunks, queries = clustered_kb
    milvus = MilvusVectorIndex(CHUNKS, settings.MILVUS_URI, timeout_s=60, prefix="recall", exact_scan_threshold=0)
    milvus.rewrite(chunk_rows_of(Chunk.objects.filter(kb_version_id=kb.active_version_id)))
    compiled = compile_filters(None if shop is None else {"metadata.shop_id": shop})
    rows = [c for c in chunks if shop is None or c.metadata["shop_id"] == shop]
    found = 0
    for query in queries:
        hits = milvus.search(scope_of(kb), query, 10, compiled.sql, None, exact_field_filter(compiled))
        assert len(hits) == 10 and all(hit.chunk_id in {c.pk for c in rows} for hit in hits)
        found += len({hit.chunk_id for hit in hits} & {i for i, _ in brute_force(rows, query, 10)})
    assert found / (10 * len(queries)) >= 0.95


def shop_rows(chunks, shop):
    return [c for c in chunks if c.metadata["shop_id"] == shop]


def test_a_scope_under_the_exact_scan_limit_is_scanned_exactly_in_postgresql_without_milvus(clustered_kb):  # noqa: F811
    kb, chunks, queries = clustered_kb  # 300 rows of shop 1, under the default limit (8,000)
    milvus = MilvusVectorIndex(CHUNKS, UNREACHABLE, timeout_s=2, prefix="recall")
    compiled = compile_filters({"metadata.shop_id": 1})
    assert milvus.plan(scope_of(kb), compiled.sql) == len(shop_rows(chunks, 1))
    for query in queries[:5]:
        hits = milvus.search(scope_of(kb), query, 10, compiled.sql, None, exact_field_filter(compiled))
        assert_same_ranking(hits, brute_force(shop_rows(chunks, 1), query, 10))


def test_a_scope_over_the_exact_scan_limit_is_searched_in_milvus(clustered_kb):  # noqa: F811
    kb, _, queries = clustered_kb
    milvus = MilvusVectorIndex(CHUNKS, UNREACHABLE, timeout_s=2, prefix="recall", exact_scan_threshold=100)
    compiled = compile_filters({"metadata.shop_id": 1})
    assert milvus.plan(scope_of(kb), compiled.sql) == 101  # counted up to one past the limit
    with pytest.raises(VectorIndexError) as raised:
        milvus.search(scope_of(kb), queries[0], 10, compiled.sql, None, exact_field_filter(compiled))
    assert raised.value.cause == "vector_index_unavailable"
