"""What ``bench.scale`` measures at each size besides its builds: exact scan against the HNSW walk per
filter, where a filtered BM25 leg's time goes, and recall@k and latency of a search function against the
exact top k. Its callers set up Django first."""

from __future__ import annotations

import time

import numpy as np

from bench.harness import stats
from bench.harness.postgres import plan_shape


def recall_and_latency(search, truth: dict, ids: np.ndarray, vectors: np.ndarray, top_k: int) -> dict:
    """Per filter name of ``truth`` (its exact top k as row numbers; ``ids``: row number -> chunk id):
    recall@k and latency of ``search(vector, filter name) -> chunk ids in rank order``, the share of the
    exact top k found (of all matching rows when fewer match) and the searches that returned fewer than k."""
    out = {}
    for name, expected_rows in truth.items():
        for vector in vectors[:5]:
            search(vector, name)  # warm-up
        recalls, times, short = [], [], 0
        for vector, expected in zip(vectors, expected_rows):
            started = time.perf_counter()
            hits = search(vector, name)
            times.append(time.perf_counter() - started)
            short += len(hits) < top_k
            recalls.append(len(set(hits[:top_k]) & set(ids[expected].tolist())) / max(1, len(expected)))
        out[name or "none"] = {
            "recall_at_10": round(float(np.mean(recalls)), 4),
            "min_recall": round(min(recalls), 2),
            "short": short,
            **stats.summarize_ms(times),
        }
    return out


def exact_or_hnsw(scope, compiled: dict, vectors: np.ndarray, queries: int, max_exact_rows: int) -> dict:
    """Per filter: the rows it matches, ``PgVectorIndex.search`` forced exact and forced through the
    HNSW graph (the iterative scan; its exact fallback included), interleaved query by query and timed
    without the row-count probe, and the plan PostgreSQL picks for the graph query when not steered."""
    from django.conf import settings
    from django.db import connection
    from psycopg import sql

    from engines.pgvector_index import PgVectorIndex, register_vector_type

    depth, dim = settings.SEARCH_CANDIDATES, scope.embedding_dim
    forced = {
        "exact": PgVectorIndex("knowledge_chunk", exact_scan_threshold=10**12),
        "hnsw": PgVectorIndex("knowledge_chunk", exact_scan_threshold=0),
    }
    out = {}
    for name, spec in compiled.items():
        where, params = PgVectorIndex._where(scope, spec.sql)
        register_vector_type()
        with connection.cursor() as cursor:
            count = sql.SQL("SELECT count(*) FROM knowledge_chunk WHERE {}").format(where)
            cursor.execute(count.as_string(cursor.cursor), params)
            matching = cursor.fetchone()[0]
            explain = sql.SQL(
                "EXPLAIN (FORMAT JSON) SELECT id FROM knowledge_chunk WHERE {} ORDER BY "
                f"(embedding::halfvec({dim})) <=> %s::halfvec({dim}) LIMIT %s"
            ).format(where)
            cursor.execute(explain.as_string(cursor.cursor), [*params, vectors[0], depth])
            planner = plan_shape(cursor.fetchone()[0])
        paths = [path for path in forced if path == "hnsw" or matching <= max_exact_rows]
        times: dict = {path: [] for path in paths}
        short = dict.fromkeys(paths, 0)
        for i, vector in enumerate(vectors[:queries]):
            for path in paths[i % len(paths) :] + paths[: i % len(paths)]:
                started = time.perf_counter()
                hits = forced[path].search(scope, vector, depth, spec.sql, plan=matching)
                times[path].append(time.perf_counter() - started)
                short[path] += len(hits) < min(depth, matching)
        out[name] = {
            "matching_rows": matching,
            "planner_unsteered": planner,
            **{path: {**stats.summarize_ms(times[path]), "short": short[path]} for path in paths},
        }
    return out


def keyword_filter_cost(tenant, version, filters: dict, compiled: dict, queries: list[str], limit: int) -> dict:
    """Where a filtered BM25 leg's time goes, per filter (``filters``: the request's filter by name,
    ``compiled``: its compiled SQL): the read of the matching chunk ids
    (``selectors.filtered_chunk_ids``, up to ``limit``) and the keyword index searched inside them,
    against the index searched without them; then the whole leg (``search`` in ``bm25`` mode, result
    cache off) searching inside the ids (``LEXICAL_FILTER_MAX_IDS`` huge) and without them (1), and
    whether both found the same hits; interleaved query by query."""
    from django.conf import settings
    from django.test import override_settings

    from engines import get_lexical_index
    from knowledge.selectors.search import analyzer_for_tenant
    from retrieval import selectors
    from retrieval.services.search import search
    from retrieval.types import SearchRequest

    index, analyzer, depth = get_lexical_index(), analyzer_for_tenant(tenant.pk), settings.SEARCH_CANDIDATES
    versions = (version.pk,)
    out = {}
    for name, spec in compiled.items():
        times: dict = {
            "read_ids": [],
            "index_inside_ids": [],
            "index_unfiltered": [],
            "leg_inside_ids": [],
            "leg_without_ids": [],
        }
        allowed, differing = None, 0
        for i, text in enumerate(queries):
            hits, paths = {}, [("leg_inside_ids", 10**9), ("leg_without_ids", 1)]
            for path, cap in paths[i % 2 :] + paths[: i % 2]:
                request = SearchRequest(query=text, mode="bm25", top_k=10, filters=filters[name])
                with override_settings(LEXICAL_FILTER_MAX_IDS=cap, SEARCH_CACHE_TTL_S=0):
                    started = time.perf_counter()
                    hits[path] = [(hit.chunk_id, hit.score) for hit in search(tenant, request).results]
                    times[path].append(time.perf_counter() - started)
            differing += hits["leg_inside_ids"] != hits["leg_without_ids"]
            tokens = analyzer.tokens(text)
            started = time.perf_counter()
            allowed = selectors.filtered_chunk_ids(tenant, versions, spec, limit)
            times["read_ids"].append(time.perf_counter() - started)
            started = time.perf_counter()
            index.search(version.pk, tenant.pk, tokens, depth, allowed)
            times["index_inside_ids"].append(time.perf_counter() - started)
            started = time.perf_counter()
            index.search(version.pk, tenant.pk, tokens, depth, None)
            times["index_unfiltered"].append(time.perf_counter() - started)
        out[name] = {
            "ids": None if allowed is None else len(allowed),
            "legs_differing": differing,
            **{part: stats.summarize_ms(seconds)["p50_ms"] for part, seconds in times.items()},
        }
    return out
