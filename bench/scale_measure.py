"""What bench/scale.py measures at each size besides its builds: exact scan against the HNSW walk per
filter, where a filtered BM25 leg's time goes, recall@k and latency of a search function against the exact
top k, the PostgreSQL server's peak memory while an index builds, and the latency over HTTP. Its callers
set up Django first; ``plan_shape`` is bench/scale_profile.py's too."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import _common
import httpx
import numpy as np


def plan_shape(explain: list) -> str:
    """The node chain of an ``EXPLAIN (FORMAT JSON)`` plan, first child first (index names included)."""
    node, shape = explain[0]["Plan"], []
    while node:
        shape.append(node["Node Type"] + (f" ({node['Index Name']})" if "Index Name" in node else ""))
        node = (node.get("Plans") or [None])[0]
    return " > ".join(shape)


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
            **_common.summarize_ms(times),
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
            **{path: {**_common.summarize_ms(times[path]), "short": short[path]} for path in paths},
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
            **{part: _common.summarize_ms(seconds)["p50_ms"] for part, seconds in times.items()},
        }
    return out


class PeakMemory:
    """Samples the PostgreSQL server's processes (the children of its postmaster) while a build runs."""

    def __init__(self, postmaster_pid: int):
        self.postmaster_pid = postmaster_pid
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self.sample())
            self._stop.wait(0.2)

    def sample(self) -> int:
        private, shared = 0, 0
        for pid in self._server_pids():
            try:
                fields = dict(
                    line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
                )
            except OSError:
                continue
            private += int(fields.get("RssAnon", "0 kB").split()[0]) * 1024
            shared = max(shared, int(fields.get("RssShmem", "0 kB").split()[0]) * 1024)
        return private + shared

    def _server_pids(self) -> list[int]:
        pids = [self.postmaster_pid]
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.postmaster_pid:
                    pids.append(int(stat.parent.name))
            except (OSError, ValueError, IndexError):
                continue
        return pids


def print_http(http: dict) -> None:
    print(
        "  HTTP p50 (p95) ms: "
        + ", ".join(f"{name} {v['p50_ms']} ({v['p95_ms']}) short {v['short']}" for name, v in http.items()),
        flush=True,
    )


def http_run(args, key: str, queries: list[str], workdir: Path, scenarios: list, filters: dict) -> dict:
    """One gunicorn like ``./run serve`` (result cache off); the ``scenarios`` (name, URL name, name of its
    filter in ``filters`` or None) interleaved query by query."""
    from django.urls import reverse

    port = _common.free_port()
    base_url = f"http://127.0.0.1:{port}"
    proc = _common.start_gunicorn(port, workdir / "gunicorn.log", {"SEARCH_CACHE_TTL_S": "0"})
    times = {name: [] for name, _, _ in scenarios}
    stages: dict = {name: {} for name, _, _ in scenarios}
    short = {name: 0 for name, _, _ in scenarios}
    try:
        _common.wait_ready(proc, base_url)
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
            for i, query in enumerate(queries):
                order = scenarios[i % len(scenarios) :] + scenarios[: i % len(scenarios)]
                for name, endpoint, filter_name in order:
                    body = {"query": query, "top_k": args.top_k, "rerank": False}
                    if filter_name:
                        body["filters"] = filters[filter_name]
                    t0 = time.perf_counter()
                    response = client.post(reverse(endpoint), json=body)
                    elapsed = time.perf_counter() - t0
                    if response.status_code != 200:
                        raise RuntimeError(f"{name}: HTTP {response.status_code}: {response.text[:300]}")
                    if i < args.warmup:
                        continue
                    payload = response.json()
                    times[name].append(elapsed)
                    short[name] += len(payload.get("results", [])) < args.top_k
                    for stage, ms in (payload.get("timings_ms") or {}).items():
                        stages[name].setdefault(stage, []).append(ms)
    finally:
        _common.stop_process(proc)
    return {
        name: {
            **_common.summarize_ms(times[name]),
            "short": short[name],
            "server_stage_p50_ms": {s: round(_common.percentile(v, 50), 2) for s, v in sorted(stages[name].items())},
        }
        for name, _, _ in scenarios
    }
