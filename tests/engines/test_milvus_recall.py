"""Milvus (Milvus Lite) against exact numpy cosine on the clustered rows of test_hnsw_parameters.py.

Recall@10 of the walk, unfiltered and with a 10 % metadata filter applied inside Milvus (the exact-scan
limit set to 0, so that every search walks): a small collection, which Milvus may search partly exactly,
so this proves the search path (scope, filter, order), not the graph's recall at size
(docs/BENCHMARKS.md, "Milvus against pgvector"). What Milvus is not asked: test_milvus_index.py."""

from __future__ import annotations

import pytest

from engines.milvus_index import MilvusVectorIndex
from knowledge.models import Chunk
from knowledge.stores import chunk_rows_of
from retrieval.filters import compile_filters
from retrieval.keyword_filter import exact_field_filter
from tests.engines.pgvector_rows import CHUNKS, brute_force, scope_of
from tests.engines.test_hnsw_parameters import clustered_kb  # noqa: F401 (3,000 clustered chunks)

pytestmark = pytest.mark.django_db


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
