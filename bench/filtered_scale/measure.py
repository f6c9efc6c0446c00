"""What ``bench.filtered_scale`` measures in process besides the engine calls: ``search()`` with some
settings changed, and the ``--storage-ab`` exact scans of two tables with different vector storage."""

from __future__ import annotations

import time

import numpy as np

from bench.harness import stats

AB_TABLE = "bench_chunk_storage_ab"


def storage_ab(storage: str, execute, scope, compiled: dict, queries: np.ndarray, depth: int) -> dict:
    """The tenant's rows copied into a side table whose vector column has ``storage`` (its btree/GIN
    filter indexes, no HNSW), then per filter an exact scan of each table, query by query in turn (one
    run, the same load): p50/p95 ms, and each table's heap and TOAST size. The side table is dropped."""
    from engines.base import SqlFilter
    from engines.pgvector_index import PgVectorIndex

    execute(f"DROP TABLE IF EXISTS {AB_TABLE}")
    execute(f"CREATE TABLE {AB_TABLE} (LIKE knowledge_chunk INCLUDING DEFAULTS INCLUDING INDEXES)")
    for (name,) in execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef ILIKE %s", [AB_TABLE, "%hnsw%"]
    ):
        execute(f'DROP INDEX "{name}"')
    execute(f"ALTER TABLE {AB_TABLE} ALTER COLUMN embedding SET STORAGE {storage.upper()}")
    t0 = time.perf_counter()
    execute(f"INSERT INTO {AB_TABLE} SELECT * FROM knowledge_chunk WHERE tenant_id = %s", [scope.tenant_id])
    copy_s = time.perf_counter() - t0
    execute(f"VACUUM ANALYZE {AB_TABLE}")
    engines = {
        "knowledge_chunk": PgVectorIndex("knowledge_chunk", exact_scan_threshold=10**9),
        AB_TABLE: PgVectorIndex(AB_TABLE, exact_scan_threshold=10**9),
    }
    out: dict = {"storage": storage, "copy_s": round(copy_s, 1), "sizes_mb": {}, "exact": {}}
    try:
        for table in engines:
            heap, toast = execute(
                "SELECT pg_relation_size(oid), coalesce(pg_total_relation_size(nullif(reltoastrelid, 0)), 0) "
                "FROM pg_class WHERE relname = %s",
                [table],
            )[0]
            out["sizes_mb"][table] = {"heap": round(heap / 2**20), "toast": round(toast / 2**20)}
        for name, spec in compiled.items():
            if not spec.sql:
                continue
            seconds: dict = {table: [] for table in engines}
            for i, q in enumerate(queries):
                for table, engine in engines.items():
                    where = SqlFilter(spec.sql.sql.replace('"knowledge_chunk".', f'"{table}".'), spec.sql.params)
                    started = time.perf_counter()
                    engine.search(scope, q, depth, where)
                    if i >= 3:
                        seconds[table].append(time.perf_counter() - started)
            out["exact"][name] = {table: stats.summarize_ms(s) for table, s in seconds.items()}
    finally:
        execute(f"DROP TABLE IF EXISTS {AB_TABLE}")
    return out


def searched_with(changes: dict, tenant, request):
    from django.test import override_settings

    from retrieval.services.search import search

    with override_settings(**changes):
        return search(tenant, request)
