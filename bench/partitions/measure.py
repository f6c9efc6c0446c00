"""What ``bench.partitions`` measures per tenant: recall@k of the service's vector search against exact
and its p50 (engine calls, no HTTP), and the time to build a graph over one partition's rows."""

from __future__ import annotations

import statistics
import time

import numpy as np


def search_tenants(
    engine, scopes: dict[int, object], truth: dict[int, list[np.ndarray]], queries, top_k: int, depth: int
) -> dict:
    """Per tenant: recall@top_k of the first ``top_k`` of ``engine.search`` to ``depth`` (the service
    searches to its candidates' depth, which sizes ef_search) against ``truth`` (each query's exact top
    chunk ids), and the p50 / p95 of its calls in milliseconds."""
    from engines.base import SqlFilter

    found = {}
    for tenant_id, scope in scopes.items():
        latencies, recalls = [], []
        for query, expected in zip(queries, truth[tenant_id], strict=True):
            started = time.perf_counter()
            hits = engine.search(scope, query, depth, SqlFilter())[:top_k]
            latencies.append((time.perf_counter() - started) * 1000)
            recalls.append(len({hit.chunk_id for hit in hits} & set(expected.tolist())) / top_k)
        latencies.sort()
        found[tenant_id] = {
            "recall": round(statistics.fmean(recalls), 4),
            "p50_ms": round(statistics.median(latencies), 2),
            "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 2),
        }
    return found


def build_seconds(table: str, dimension: int, m: int, ef_construction: int) -> float:
    """The time to build the dimension's HNSW graph over ``table``'s rows (a partition, or the whole
    table), as a scratch index that is dropped again."""
    from django.db import connection
    from psycopg import sql

    statement = sql.SQL(
        "CREATE INDEX bench_partition_graph ON {table} USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) "
        "WITH (m = {m}, ef_construction = {ef}) WHERE embedding_dim = {dim}"
    ).format(
        table=sql.Identifier(table),
        dim=sql.Literal(dimension),
        m=sql.Literal(m),
        ef=sql.Literal(ef_construction),
    )
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS bench_partition_graph")
        started = time.perf_counter()
        cursor.execute(statement.as_string(cursor.cursor))
        seconds = time.perf_counter() - started
        cursor.execute("DROP INDEX bench_partition_graph")
    return round(seconds, 2)
