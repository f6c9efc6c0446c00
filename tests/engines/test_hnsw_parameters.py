"""HNSW parameters chosen from the index's size (engines.hnsw_parameters): the choice, the recall it
gives against exact search on real pgvector (a small index: the 100k and 1M figures are bench runs,
docs/BENCHMARKS.md), and the rebuild hint for an index built for fewer rows than it holds."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engines import hnsw_parameters, pgvector_index
from engines.hnsw_parameters import BuildParameters, build_parameters_for, ef_search_for, needs_rebuild
from engines.pgvector_index import PgVectorIndex
from knowledge.stores import vector_rebuild_advice
from retrieval.filters import compile_filters
from tests.engines.pgvector_rows import CHUNKS, NO_FILTER, add_chunks, brute_force, graph_walk_only, scope_of
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory

RECALL_ROWS = 3000
CLUSTERS = 60


# --- the choice --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "top_k", "expected"),
    [
        (0, 10, 100),  # the floor: an empty or small index
        (100_000, 10, 100),
        (100_000, 100, 200),  # twice the depth (the service's candidates: 100)
        (200_000, 100, 325),  # between 200 (0.955 measured at 200k) and 400 (0.975)
        (1_000_000, 100, 1000),  # pgvector's limit, 0.961 at 1M with the larger build
        (1_000_000, 10, 502),
        (10_000_000, 10, 1000),
        (50_000, 600, 1000),  # a depth past the limit: the iterative scan walks on
    ],
)
def test_ef_search_grows_with_the_index_and_the_depth(rows, top_k, expected):
    assert ef_search_for(rows, top_k) == expected


def test_ef_search_never_shrinks_as_the_index_grows():
    sizes = [10**exponent for exponent in range(3, 8)]
    chosen = [ef_search_for(rows, 50) for rows in sizes]
    assert chosen == sorted(chosen) and chosen[0] < chosen[-1]


def test_a_large_build_gets_the_larger_graph():
    assert build_parameters_for(0) == build_parameters_for(299_999) == BuildParameters(16, 64)
    assert build_parameters_for(300_000) == build_parameters_for(1_000_000) == BuildParameters(24, 128)


@pytest.mark.parametrize(
    ("built", "wanted", "rebuild"),
    [
        ((16, 64), BuildParameters(24, 128), True),
        ((24, 64), BuildParameters(24, 128), True),
        ((24, 128), BuildParameters(24, 128), False),
        ((32, 200), BuildParameters(24, 128), False),  # larger: left alone
        ((None, None), BuildParameters(24, 128), False),  # made by hand
        (None, BuildParameters(24, 128), False),  # no index
    ],
)
def test_a_rebuild_is_advised_only_for_a_smaller_graph(built, wanted, rebuild):
    assert needs_rebuild(built, wanted) is rebuild


def test_a_set_m_keeps_ef_construction_at_least_twice_it(settings):
    settings.HNSW_M, settings.HNSW_EF_CONSTRUCTION = 40, None
    assert PgVectorIndex(CHUNKS).build_parameters(DIMENSION, rows=10) == BuildParameters(40, 80)


# --- recall on real pgvector --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clustered_kb(django_db_setup, django_db_blocker):
    """3,000 chunks in 60 clusters (near-copies, the hard case for a graph), every 10th with shop_id 1;
    committed for the module and vacuumed so the graph holds only them and their predecessors' live rows."""
    rng = np.random.default_rng(46)
    centres = rng.standard_normal((CLUSTERS, DIMENSION))
    labels = rng.integers(0, CLUSTERS, RECALL_ROWS)
    vectors = (centres[labels] + 0.35 * rng.standard_normal((RECALL_ROWS, DIMENSION))).astype(np.float32)
    queries = (centres[rng.integers(0, CLUSTERS, 20)] + 0.35 * rng.standard_normal((20, DIMENSION))).astype(np.float32)
    with django_db_blocker.unblock():
        kb = KnowledgeBaseFactory()
        try:
            metadata = [{"shop_id": 1 if i % 10 == 0 else 2} for i in range(RECALL_ROWS)]
            chunks = add_chunks(DocumentFactory(knowledge_base=kb), list(vectors), metadata=metadata)
            PgVectorIndex(CHUNKS).ensure_index(DIMENSION)
            with connection.cursor() as cursor:
                cursor.execute("VACUUM knowledge_chunk")
                cursor.execute("ANALYZE knowledge_chunk")
            pgvector_index._rows_in_index.cache_clear()
            yield kb, chunks, list(queries)
        finally:
            kb.tenant.delete()
            pgvector_index._rows_in_index.cache_clear()


def recall_at_10(index, kb, chunks, queries, filters=NO_FILTER, shop=None) -> tuple[float, list[str]]:
    """Mean recall@10 of graph walks against exact numpy cosine, and the ef_search each walk ran with."""
    rows = [c for c in chunks if shop is None or c.metadata["shop_id"] == shop]
    found = 0
    with CaptureQueriesContext(connection) as ctx, graph_walk_only():
        for query in queries:
            hits = index.search(scope_of(kb), query, 10, filters)
            found += len({h.chunk_id for h in hits} & {i for i, _ in brute_force(rows, query, 10)})
    ef = re.findall(r"set_config\('hnsw\.ef_search', '(\d+)', true\)", " ".join(q["sql"] for q in ctx.captured_queries))
    return found / (10 * len(queries)), ef


@pytest.mark.django_db
@pytest.mark.parametrize("shop", [None, 1], ids=["unfiltered", "filtered 10 %"])
def test_the_default_walk_recalls_at_least_095_against_exact(clustered_kb, shop):
    kb, chunks, queries = clustered_kb
    filters = NO_FILTER if shop is None else compile_filters({"metadata.shop_id": shop}).sql
    index = PgVectorIndex(CHUNKS, exact_scan_threshold=0)  # always the graph walk
    assert index.ef_search is None  # the setting is unset: chosen per search

    recall, ef = recall_at_10(index, kb, chunks, queries, filters, shop)

    assert recall >= 0.95
    assert set(ef) == {"100"}  # a 3,000-row index, depth 10: the floor


@pytest.mark.django_db
def test_a_walk_in_a_graph_counted_as_large_searches_a_longer_list(clustered_kb, monkeypatch):
    """The same index taken as 30x the reference size: its walks run with a ten-fold list or more."""
    kb, chunks, queries = clustered_kb
    monkeypatch.setattr(hnsw_parameters, "EF_SEARCH_REFERENCE_ROWS", RECALL_ROWS // 30)
    _, ef = recall_at_10(PgVectorIndex(CHUNKS, exact_scan_threshold=0), kb, chunks, queries[:2])
    assert set(ef) == {str(ef_search_for(pgvector_index._rows_in_index(DIMENSION), 10))}
    assert int(ef[0]) >= 1000


# --- the rebuild hint ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_index_built_smaller_than_its_rows_call_for_gets_a_hint_in_check_kb_and_the_console(
    clustered_kb, admin_client
):
    kb, _, _ = clustered_kb
    page = f"/admin/knowledge/knowledgebase/{kb.pk}/lifecycle/"
    assert vector_rebuild_advice([DIMENSION]) == []  # built for its rows
    assert "rebuild-hint" not in admin_client.get(page).content.decode()
    PgVectorIndex(CHUNKS, m=8, ef_construction=32).rebuild_index(DIMENSION)
    try:
        (advice,) = vector_rebuild_advice([DIMENSION])
        assert (advice.built, advice.wanted) == ((8, 32), BuildParameters(16, 64))
        out = io.StringIO()
        with pytest.raises(CommandError, match="drift"):  # the rows were never keyword-indexed: drift too
            call_command("check_kb", kb=kb.name, tenant=kb.tenant.name, stdout=out)
        assert f"REBUILD HINT the HNSW index of dimension {DIMENSION} was built with m 8, ef_construction 32" in (
            out.getvalue()
        )
        assert "rebuild_vector_index" in out.getvalue()
        html = admin_client.get(page).content.decode()
        assert f'class="rebuild-hint">Rebuild advised: the HNSW index of dimension {DIMENSION}' in html
    finally:
        PgVectorIndex(CHUNKS).rebuild_index(DIMENSION)
    assert vector_rebuild_advice([DIMENSION]) == []
