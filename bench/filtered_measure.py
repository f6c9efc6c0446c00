"""How bench/filtered_scale.py measures: searches timed query by query (several ways in turn), recall@10
against an exact top-10 computed in numpy, every mode and filter over HTTP on one gunicorn (with where
each response's time went, bench/scale_profile.py), and the ``--storage-ab`` exact scans of two tables."""

from __future__ import annotations

import time
from pathlib import Path

import _common
import numpy as np
import peers
import scale_profile

MODES = ("vector", "bm25", "hybrid")


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
            out["exact"][name] = {table: _common.summarize_ms(s) for table, s in seconds.items()}
    finally:
        execute(f"DROP TABLE IF EXISTS {AB_TABLE}")
    return out


def searched_with(changes: dict, tenant, request):
    from django.test import override_settings

    from retrieval.services.search import search

    with override_settings(**changes):
        return search(tenant, request)


def timed_in_turn(calls: dict, items, warmup: int = 3) -> dict:
    """p50/p95 of each of ``calls`` over items, the calls in turn per item (the first ``warmup`` untimed)."""
    seconds: dict = {name: [] for name in calls}
    for i, item in enumerate(items):
        for name, fn in calls.items():
            started = time.perf_counter()
            fn(item)
            if i >= warmup:
                seconds[name].append(time.perf_counter() - started)
    return {name: _common.summarize_ms(s) for name, s in seconds.items()}


def timed(fn, items, warmup: int = 3) -> tuple[dict, list]:
    """p50/p95 of ``fn(item)`` over items (the first ``warmup`` untimed) and each item's result."""
    for item in items[:warmup]:
        fn(item)
    seconds, results = [], []
    for item in items:
        started = time.perf_counter()
        results.append(fn(item))
        seconds.append(time.perf_counter() - started)
    return _common.summarize_ms(seconds), results


def recall(found: list[list[int]], truth: list[np.ndarray], k: int) -> float:
    """Mean share of the exact top k found (of all matching rows, when fewer match); None if none match."""
    shares = [len(set(f[:k]) & set(t.tolist())) / len(t) for f, t in zip(found, truth) if len(t)]
    return round(float(np.mean(shares)), 4) if shares else None


def http_run(args, key: str, queries: list[str], workdir: Path) -> dict:
    """One gunicorn as ``./run serve`` starts it (result cache off); every mode x filter interleaved."""
    import httpx
    from django.urls import reverse

    port = _common.free_port()
    proc = _common.start_gunicorn(port, workdir / "gunicorn.log", {"SEARCH_CACHE_TTL_S": "0"})
    scenarios = [(mode, flt) for flt in peers.FILTERS for mode in MODES]
    times: dict = {(mode, flt.name): [] for mode, flt in scenarios}
    profile = scale_profile.StageProfile()
    try:
        _common.wait_ready(proc, f"http://127.0.0.1:{port}")
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=120
        ) as client:
            for i, query in enumerate(queries[: args.warmup + args.requests]):
                for mode, flt in scenarios[i % len(scenarios) :] + scenarios[: i % len(scenarios)]:
                    body = {
                        "query": query,
                        "top_k": 10,
                        "rerank": False,
                        **({"filters": flt.service} if flt.service else {}),
                    }
                    started = time.perf_counter()
                    response = client.post(reverse(f"retrieval-{mode}"), json=body)
                    elapsed = time.perf_counter() - started
                    if response.status_code != 200:
                        raise RuntimeError(f"{mode} {flt.name}: HTTP {response.status_code}: {response.text[:300]}")
                    if i >= args.warmup:
                        times[(mode, flt.name)].append(elapsed)
                        profile.add(f"{mode} | {flt.name}", elapsed, response.json())
        memory = {"gunicorn_rss_mb": round(_tree_rss(proc.pid) / 2**20)}
    finally:
        _common.stop_process(proc)
    scenarios_ms = {f"{mode} | {name}": _common.summarize_ms(s) for (mode, name), s in times.items()}
    return {"scenarios": scenarios_ms, "stages": profile.summary(), **memory}


def _tree_rss(pid: int) -> int:
    """Resident memory of a process and its children (gunicorn's master and workers)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(status.parent.name) == pid or int(fields.get("PPid", "0")) == pid:
            total += int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    return total
