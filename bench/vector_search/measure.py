"""What ``bench.vector_search`` measures once its rows are loaded: the plans each filter's search takes,
the latency over HTTP per ``TORCH_THREADS`` config and HNSW's recall@k against the exact scan. Imported
after Django is set up."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from bench.harness import http, postgres, server, stats
from engines.pgvector_index import PgVectorIndex, hnsw_index_name
from knowledge.models import Chunk

TABLE = Chunk._meta.db_table


class ProbedIndex(PgVectorIndex):
    """A ``PgVectorIndex`` that records the path each statement of its last search took: ["hnsw"], ["exact"],
    or ["hnsw", "exact"] when the walk found too few rows and the search fell back."""

    def search(self, *args, **kwargs):
        self.plans: list[str] = []
        return super().search(*args, **kwargs)

    def _run(self, cursor, query, arguments, *, exact, **options):
        self.plans.append("exact" if exact else "hnsw")
        return super()._run(cursor, query, arguments, exact=exact, **options)


def search_plans(scope, compiled: dict, vector, top_k: int) -> dict:
    """Per filter: the path the service's engine takes for one query, whether its nearest-rows statement
    uses the HNSW index, and ``EXPLAIN ANALYZE`` of each statement it runs (the row count, the nearest rows)."""
    index = ProbedIndex(TABLE)
    index_name = hnsw_index_name(scope.embedding_dim)
    plans = {}
    for name, spec in compiled.items():
        statements = postgres.explained(index, scope, spec, vector, top_k)
        plans[name] = {
            "path": " then ".join(index.plans),
            "uses_hnsw_index": any(index_name in json.dumps(plan) for kind, plan in statements if kind == "nearest"),
            "statements": [{"statement": kind, "plan": plan} for kind, plan in statements],
        }
    return plans


def http_latency(config: str, *, args, queries: list[str], endpoint: str, key: str, scenarios: dict, workdir: Path):
    """One gunicorn with ``TORCH_THREADS=config`` (``default``: unset), the scenarios interleaved query by
    query (``bench.harness.http``); how long it took to answer at all and to answer its first search."""
    env = {} if config == "default" else {"TORCH_THREADS": config}
    if not args.server_cache:
        env["SEARCH_CACHE_TTL_S"] = "0"  # measure searches, not the result cache
    requests = [
        http.Scenario(name, endpoint, {} if spec is None else {"filters": spec}) for name, spec in scenarios.items()
    ]
    started = time.perf_counter()
    with server.gunicorn(workdir / "gunicorn.log", env) as (base_url, _):
        ready_s = time.perf_counter() - started
        started = time.perf_counter()
        http.http_run(base_url, key, requests[:1], queries[:1], warmup=0, top_k=args.top_k)  # loads the model
        first_s = time.perf_counter() - started
        run = http.http_run(
            base_url, key, requests, queries, warmup=args.warmup, top_k=args.top_k, budget_s=args.http_budget_s
        )
    return {
        "torch_threads": config,
        "gunicorn_ready_s": round(ready_s, 1),
        "first_request_s": round(first_s, 2),
        "time_budget_hit": run["budget_hit"],
        "scenarios": run["scenarios"],
    }


def hnsw_recall(scope, compiled: dict, vectors, ef_values: list[int], top_k: int) -> dict:
    """Per filter and ``ef_search``: recall@k of the walk (forced, threshold 1) against the exact scan,
    the queries that got fewer than k rows or fell back to exact, the k-th hit's similarity gap and the
    search time."""
    exact_index = PgVectorIndex(TABLE, exact_scan_threshold=10**9)
    recall: dict = {}
    for name, spec in compiled.items():
        truth_hits = [exact_index.search(scope, vector, top_k, spec.sql) for vector in vectors]
        recall[name] = {}
        for ef in ef_values:
            probe = ProbedIndex(TABLE, exact_scan_threshold=1, ef_search=ef)
            scores, times, fewer, fallbacks, gaps = [], [], 0, 0, []
            for vector, expected in zip(vectors, truth_hits):
                started = time.perf_counter()
                hits = probe.search(scope, vector, top_k, spec.sql)
                times.append(time.perf_counter() - started)
                got = {hit.chunk_id for hit in hits}
                scores.append(len(got & {h.chunk_id for h in expected}) / max(1, len(expected)))
                if hits and expected:
                    # similarity of the k-th exact hit minus that of the k-th HNSW hit (0 = as good)
                    gaps.append(expected[-1].score - hits[-1].score)
                fewer += len(hits) < top_k
                fallbacks += probe.plans[:2] == ["hnsw", "exact"]
            recall[name][str(ef)] = {
                "recall_at_k": round(statistics.fmean(scores), 4),
                "min_recall": round(min(scores), 2),
                "queries_with_fewer_than_k": fewer,
                "exact_fallbacks": fallbacks,
                "queries_recall_1": sum(s == 1 for s in scores),
                "queries_recall_below_0.5": sum(s < 0.5 for s in scores),
                "kth_similarity_gap_mean": round(statistics.fmean(gaps), 4) if gaps else None,
                "kth_similarity_gap_max": round(max(gaps), 4) if gaps else None,
                "search": stats.summarize_ms(times),
            }
        print(
            f"recall {name}: " + ", ".join(f"ef {ef} {recall[name][str(ef)]['recall_at_k']:.3f}" for ef in ef_values),
            flush=True,
        )
    return recall
