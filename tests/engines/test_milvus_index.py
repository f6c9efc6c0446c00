"""What ``MilvusVectorIndex`` answers without Milvus: a search whose scope is under the exact-scan
limit (an exact scan in PostgreSQL, which holds the rows), and the scores of chunks by id. Milvus is
unreachable here, so a call to it fails the test; a scope over the limit shows that it is called.
The expected rankings are numpy's over the rows the tests built (test_hnsw_parameters.py's clusters)."""

from __future__ import annotations

import pytest

from engines.milvus_index import MilvusVectorIndex, VectorIndexError
from retrieval.filters import compile_filters
from retrieval.keyword_filter import exact_field_filter
from tests.engines.pgvector_rows import CHUNKS, assert_same_ranking, brute_force, scope_of
from tests.engines.test_hnsw_parameters import clustered_kb  # noqa: F401 (3,000 clustered chunks)

pytestmark = pytest.mark.django_db

UNREACHABLE = "http://127.0.0.1:1"  # nothing listens on port 1: a call to Milvus fails


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


def test_scores_by_id_are_read_from_the_chunk_rows(clustered_kb):  # noqa: F811
    kb, chunks, queries = clustered_kb
    milvus = MilvusVectorIndex(CHUNKS, UNREACHABLE, timeout_s=2, prefix="recall")
    chosen = chunks[:5]
    hits = milvus.similarities(scope_of(kb), queries[0], [c.pk for c in chosen])
    expected = dict(brute_force(chosen, queries[0], 5))
    assert {hit.chunk_id: pytest.approx(hit.score, abs=1e-5) for hit in hits} == expected
