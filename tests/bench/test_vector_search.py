"""``bench.vector_search.measure`` and ``bench.vector_search.report``: which path the engine's searches
take as the bench records it, and the report read from a run's result alone (no timing is asserted)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.filtered_scale.rows import load_rows
from bench.vector_search import report as vector_search_report


@pytest.fixture
def rows(db):
    """300 rows of 8 dimensions by the bench's COPY, in one KB: (scope, vectors)."""
    from engines.base import SearchScope
    from tests.factories import KnowledgeBaseFactory

    kb = KnowledgeBaseFactory()
    vectors = np.random.default_rng(11).standard_normal((300, 8)).astype(np.float32)
    load_rows(kb, [f"passage {i}" for i in range(300)], vectors, 0)
    return SearchScope(tenant_id=kb.tenant_id, version_ids=(kb.active_version.pk,), embedding_dim=8), vectors


def test_the_probed_index_records_the_path_of_each_statement_it_runs(rows):
    from bench.vector_search import measure
    from retrieval.filters import compile_filters

    scope, vectors = rows
    exact = measure.ProbedIndex(measure.TABLE, exact_scan_threshold=10**9)
    assert len(exact.search(scope, vectors[0], 10, compile_filters(None).sql)) == 10
    assert exact.plans == ["exact"]
    walk = measure.ProbedIndex(measure.TABLE, exact_scan_threshold=1)
    walk.search(scope, vectors[0], 10, compile_filters(None).sql)
    assert walk.plans[0] == "hnsw"  # then "exact" if the walk found too few


def test_search_plans_explain_the_count_and_the_nearest_rows_of_each_filter(rows):
    from bench.vector_search import measure
    from retrieval.filters import compile_filters

    scope, vectors = rows
    plans = measure.search_plans(scope, {"no filter": compile_filters(None)}, vectors[0], 10)
    plan = plans["no filter"]
    assert plan["path"] == "exact"  # 300 rows: under the exact-scan threshold
    assert [s["statement"] for s in plan["statements"]] == ["count", "nearest"]
    assert plan["statements"][1]["plan"]["Actual Rows"] == 10
    assert plan["uses_hnsw_index"] is False  # the exact scan walks no index


def test_the_report_reads_a_run_from_its_result_alone(capsys):
    ms = {"p50_ms": 1.5, "p95_ms": 2.5, "mean_ms": 1.7, "n": 4}
    result = {
        "config": {"top_k": 10},
        "real_passages": {"count": 5183, "from_cache": True},
        "load": {
            "chunks": 2000, "copy_s": 0.2, "copy_rows_per_s": 10000, "hnsw_build_s": 2.0, "hnsw_rows_indexed": 2000,
            "hnsw_index_mb": 16.5, "analyze_s": 0.1,
        },
        "scenario_rows": {"no filter": 2000},
        "plans": {"no filter": {"path": "hnsw then exact", "uses_hnsw_index": True}},
        "service_candidate_depth": 100,
        "settings": {"VECTOR_EXACT_SCAN_THRESHOLD": 8000},
        "inprocess_query_embedding": {"1": ms},
        "inprocess_index_search": {"no filter": {"k=100": ms}},
        "inprocess_count_probe": {"no filter": ms},
        "inprocess_exact_vs_hnsw": {"no filter": {"exact": ms, "hnsw": ms}},
        "http": {
            "1": {
                "scenarios": {
                    "no filter": {
                        **ms, "server_view": ms, "server_stage_p50_ms": {"embed": 6.0, "vector": 3.0}, "short": 0,
                    }
                }
            }
        },
        "recall": {
            "queries": 4, "k": 10,
            "by_scenario": {
                "no filter": {
                    "40": {
                        "recall_at_k": 0.975, "min_recall": 0.9, "queries_with_fewer_than_k": 0, "exact_fallbacks": 1,
                        "search": ms,
                    }
                }
            },
        },
    }  # fmt: skip
    vector_search_report.print_report(result)
    out = capsys.readouterr().out
    assert "2,000 in 0.2 s (10,000 rows/s)" in out
    assert "hnsw then exact" in out and "TORCH_THREADS=1, 4 sequential requests" in out
    assert [line.split() for line in out.splitlines() if line.startswith("no filter") and "0.975" in line] == [
        ["no", "filter", "40", "0.975", "0.9", "0", "1", "1.5"]
    ]
