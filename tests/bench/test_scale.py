"""Smoke tests of ``bench.scale`` and ``bench.synthetic``: the data generator and ground truth (no timing, no large data)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, transaction

from bench import synthetic
from bench.harness.postgres import plan_shape
from bench.scale import __main__ as scale


def test_filters_select_the_rows_whose_business_fields_match():
    rows = 2_000
    for name, spec in scale.FILTERS.items():
        ((field, value),) = spec.items()
        expected = [scale.business_fields(g)[field.removeprefix("metadata.")] == value for g in range(rows)]
        assert scale.filter_mask(name, rows).tolist() == expected
    assert scale.filter_mask("10 %", rows).mean() == pytest.approx(0.10)
    assert scale.filter_mask("1 %", rows).mean() == pytest.approx(0.01)
    assert scale.filter_mask("0.1 %", rows).mean() == pytest.approx(0.001)
    assert scale.filter_mask(None, rows).all()


def test_exact_top_k_is_the_cosine_ranking_within_the_mask():
    rng = np.random.default_rng(7)
    real = rng.standard_normal((50, 16)).astype(np.float32)
    real /= np.linalg.norm(real, axis=1, keepdims=True)
    vectors, _ = synthetic.synthesize(real, 3_000, rng)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    queries = vectors[rng.integers(0, len(vectors), 40)]
    mask = scale.filter_mask("10 %", len(vectors))
    for query, top in zip(queries, synthetic.exact_top_k(vectors, queries, 10, mask)):
        allowed = np.flatnonzero(mask)
        brute = allowed[np.argsort(-(vectors[allowed] @ query), kind="stable")[:10]]
        assert mask[top].all()
        assert set(top.tolist()) == set(brute.tolist())


def test_the_exact_top_k_of_a_filter_smaller_than_k_is_all_of_it_best_first():
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((200, 16)).astype(np.float32)
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    mask = np.zeros(200, dtype=bool)
    mask[[4, 50, 120]] = True
    for query, top in zip(queries, synthetic.exact_top_k(vectors, queries, 10, mask)):
        assert sorted(top.tolist()) == [4, 50, 120]
        assert (np.diff(vectors[top] @ query) <= 0).all()


@pytest.mark.django_db
@pytest.mark.parametrize("storage", ["vector", "halfvec"])
def test_variant_ddl_builds_an_hnsw_index_with_its_storage_and_parameters(storage):
    variant = scale.Variant.parse(f"{storage}:8:32:1000")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(variant.ddl())
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [variant.name])
        (definition,) = cursor.fetchone()
        transaction.set_rollback(True)
    assert f"{storage}_cosine_ops" in definition and f"{storage}({synthetic.DIM})" in definition
    assert "m='8'" in definition and "ef_construction='32'" in definition


def test_variant_rejects_an_unknown_storage():
    with pytest.raises(ValueError, match="storage"):
        scale.Variant.parse("bit:16:64:1000")


@pytest.mark.django_db
def test_keyword_index_of_passages_analyzed_once_is_the_services_rebuild(lexical_index_dir):
    """The bench's shortcut (each distinct passage analyzed once, its tag apart) indexes the tokens the
    service's rebuild indexes: the same hits with the same scores."""
    from engines import get_lexical_index
    from knowledge.lexical import rebuild_lexical_index
    from knowledge.selectors.search import analyzer_for_tenant
    from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory

    passages = ["Warranty claims need the receipt.", "The battery lasts 12 hours; charge it overnight."]
    document = DocumentFactory(knowledge_base=KnowledgeBaseFactory())
    for g in range(40):
        ChunkFactory(document=document, content=f"{passages[g % 2]}{synthetic.SYNTHETIC_TAG}{g}]")
    version, tenant_id = document.knowledge_base.active_version, document.tenant_id
    analyzer, index = analyzer_for_tenant(tenant_id), get_lexical_index()

    def hits(query: str) -> list[tuple[int, float]]:
        found = index.search(version.pk, tenant_id, analyzer.tokens(query), 50, None)
        return [(hit.chunk_id, hit.score) for hit in found]

    queries = ["warranty receipt", "battery hours", "synthetic chunk 17"]
    assert synthetic.build_keyword_index(version) == 40
    shortcut = [hits(query) for query in queries]
    rebuild_lexical_index(version)
    assert shortcut == [hits(query) for query in queries] and all(shortcut)


def test_plan_shape_names_each_node_down_the_first_children():
    explain = [
        {
            "Plan": {
                "Node Type": "Limit",
                "Plans": [{"Node Type": "Index Scan", "Index Name": "chunk_embedding_hnsw_384"}],
            }
        }
    ]
    assert plan_shape(explain) == "Limit > Index Scan (chunk_embedding_hnsw_384)"
