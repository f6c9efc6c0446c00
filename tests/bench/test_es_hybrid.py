"""``bench.es_hybrid``'s pure parts: the client-side RRF it sets beside Elasticsearch's summed hybrid, the
query and index it sends, and the command line the full run is documented with."""

from __future__ import annotations

import pytest

from bench.es_hybrid import __main__ as es_hybrid
from bench.es_hybrid.es import RANK_CONSTANT, bm25_query, index_body, rrf


def test_rrf_sums_reciprocal_ranks_with_the_retrievers_rank_constant():
    fused = rrf([[1, 2, 3], [3, 1, 4]], window=3, size=4)
    # 1: 1/61 + 1/62; 3: 1/63 + 1/61; 2: 1/62; 4: 1/63
    assert fused == [1, 3, 2, 4]
    assert RANK_CONSTANT == 60


def test_rrf_reads_only_the_window_of_each_ranking_and_returns_size_ids():
    # 9 is second in the BM25 ranking's tail, past the window: it never counts.
    assert rrf([[1, 2, 9], [2, 3, 9]], window=2, size=10) == [2, 1, 3]
    assert rrf([[1, 2, 9], [2, 3, 9]], window=3, size=1) == [2]


def test_rrf_breaks_ties_by_the_better_single_rank_then_the_earlier_ranking():
    # 5 and 7 each score 1/61: first in one ranking each; the BM25 ranking (first) wins the tie.
    assert rrf([[5], [7]], window=1, size=2) == [5, 7]
    assert rrf([[7], [5]], window=1, size=2) == [7, 5]
    # Ranks 1 and 3 (1/61 + 1/63 = 0.032266) beat ranks 2 and 2 (2/62 = 0.032258).
    assert rrf([[6, 8, 1], [2, 8, 6]], window=3, size=2)[0] == 6


def test_rrf_rejects_an_empty_window():
    with pytest.raises(ValueError, match="at least 1"):
        rrf([[1]], window=0, size=1)


def test_the_bm25_query_is_the_services_one_clause_per_token():
    assert bm25_query(["cell", "cell", "growth"]) == {
        "bool": {
            "should": [{"term": {"body": "cell"}}, {"term": {"body": "cell"}}, {"term": {"body": "growth"}}],
            "minimum_should_match": 1,
        }
    }
    assert bm25_query([]) == {"match_none": {}}


def test_the_index_scores_like_the_services_elasticsearch_index_and_holds_the_vectors():
    from engines.elasticsearch_index import PRE_ANALYZED, SIMILARITY

    body = index_body(384, "hnsw")
    assert body["settings"]["number_of_shards"] == 1
    assert body["mappings"]["properties"]["body"]["similarity"] == SIMILARITY
    assert body["mappings"]["properties"]["body"]["analyzer"] == PRE_ANALYZED
    vector = body["mappings"]["properties"]["embedding"]
    assert vector["type"] == "dense_vector" and vector["dims"] == 384 and vector["index_options"] == {"type": "hnsw"}


def test_the_defaults_are_the_full_run_the_docs_name():
    args = es_hybrid.parse_args([])
    assert (args.rows, args.clients, args.top_k) == (100_000, 4, 10)
    assert args.datasets == "scifact:train,xquad-en:dev"


def test_the_tables_are_the_docs_rows():
    from bench.es_hybrid.report import tables

    result = {
        "relevance": [{"set": "scifact (train)", "queries": 809, "ndcg@10": {"service_hybrid": 0.71, "es_sum": 0.6}}],
        "scale": {
            "rows": 100_000,
            "top_k": 10,
            "clients": 4,
            "latency": {
                "service_hybrid": {"p50_ms": 20.04, "p95_ms": 31.0},
                "es_sum": {"p50_ms": 12.0, "p95_ms": 18.0},
            },
            "throughput": {"rps": {"service_hybrid": 80.0}},
        },
    }
    assert tables(result).splitlines() == [
        "| set | queries | service hybrid | ES query + knn |",
        "|---|---:|---:|---:|",
        "| scifact (train) | 809 | 0.7100 | 0.6000 |",
        "",
        "| at 100,000 chunks, top 10 | p50 ms | p95 ms | req/s, 4 clients |",
        "|---|---:|---:|---:|",
        "| service hybrid | 20.0 | 31.0 | 80.0 |",
        "| ES query + knn | 12.0 | 18.0 | - |",
    ]
