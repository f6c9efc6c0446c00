"""BM25 and hybrid (no rerank) latency over HTTP at 100k chunks, against the raw engine calls in-process.

    .venv/bin/python bench/hybrid_search.py
    .venv/bin/python bench/hybrid_search.py --drop-hnsw --chunks 100000 --requests 150 --torch-threads 1,2

Data: built like bench/vector_search.py (its helpers are imported, not copied): the cached real
SciFact embeddings (all 5,183 passages, default model) are mixed into 100k synthetic unit vectors
``normalize(a + 0.35 b + 0.1 g)`` and COPYed (``knowledge.ingestion.chunk_copy.copy_chunks``) into a throwaway
tenant / KB / 1,000 documents x 100 chunks. Each chunk's TEXT is the full SciFact passage of its main
component ``a`` (+ a unique ``[synthetic chunk N]`` tag so content-hash dedup keeps every row), so the
keyword index sees realistic text: every passage appears ~19 times. The lexical index is then built
with ``knowledge.lexical.rebuild_lexical_index(version)`` (timed). By default the shared HNSW index is
left in place (other benchmarks may be measuring on the same database) and the rows go into the live
graph (slow: ~200-1,000 rows/s on these machines); ``--drop-hnsw`` drops it before the COPY and
rebuilds it after (timed), like vector_search.py, and restores it in cleanup if anything fails.

Measured, per TORCH_THREADS config (OPENBLAS_NUM_THREADS=1 as retrieval_site sets it):
  * in-process raw engine calls on real SciFact queries: ``get_embedder().embed_query``,
    ``PgVectorIndex.search`` (depth SEARCH_CANDIDATES), ``TantivyLexicalIndex.search`` with the
    analyzer's tokens, ``reciprocal_rank_fusion`` of the two lists;
  * HTTP through gunicorn (``--config retrieval_site/gunicorn.conf.py --workers 1``,
    SEARCH_CACHE_TTL_S=0, bench tenant on a rate tier with a huge limit): /bm25 and /hybrid
    (rerank false), sequential, interleaved query by query, fresh queries per config.
Cleanup (always): stop gunicorn, drop the version's lexical index, delete the tenant and its tier.
Writes bench/results/hybrid_search-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# Before numpy/torch load: OpenBLAS sizes its thread pool when the library loads, so setting this later
# (retrieval_site/__init__.py does it at django.setup(), after this script imported numpy) is too late
# and leaves this process with an OpenBLAS pool fighting torch's OpenMP pool for the 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import _common


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=150, help="timed HTTP requests per endpoint per config")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--inprocess", type=int, default=100)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--torch-threads", default="1,2")
    parser.add_argument("--http-budget-s", type=float, default=45)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--drop-hnsw", action="store_true",
                        help="drop the shared HNSW index before the COPY and rebuild it after (like vector_search.py); "
                        "much faster than inserting 100k rows into the live graph, but do not use it while another "
                        "benchmark measures vector search on the same database")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    configs = [c.strip() for c in args.torch_threads.split(",") if c.strip()]

    _common.setup_django()
    import logging

    import httpx
    import torch
    from django.conf import settings
    from django.db import connection
    from django.urls import reverse

    import vector_search as vs
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.lexical import rebuild_lexical_index
    from knowledge.models import Chunk
    from knowledge.stores import vector_index
    from knowledge.selectors import analyzer_for_tenant
    from engines.embedders import get_embedder
    from engines import get_lexical_index
    from engines.base import SearchScope
    from engines.pgvector_index import PgVectorIndex
    from retrieval.filters import compile_filters
    from retrieval.fusion import RankedList, reciprocal_rank_fusion
    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    endpoints = {"bm25": reverse("retrieval-bm25"), "hybrid": reverse("retrieval-hybrid")}
    result: dict = {"config": vars(args), "machine": _common.machine_info(),
                    "loadavg_at_start": [round(x, 2) for x in load_at_start],
                    "code": _common.code_fingerprint(["retrieval/services/search.py", "retrieval/views.py",
                                                      "engines/tantivy_index.py", "retrieval/fusion.py",
                                                      "engines/pgvector_index.py", "knowledge/lexical.py"])}
    tenant = tier = proc = version = None
    index_dropped = False
    workdir = Path(tempfile.mkdtemp(prefix="bench-hybrid-"))
    t_start = time.perf_counter()
    try:
        passages, queries = _common.scifact_passages_and_queries()
        embedder = get_embedder()
        real, embed_s, cached = vs.real_vectors(embedder, passages, cache=True)
        rng = np.random.default_rng(args.seed)
        vectors, main_component = vs.synthesize(real, args.chunks, rng)
        if args.chunks % args.docs:
            raise SystemExit("--chunks must be a multiple of --docs")

        tenant = create_tenant(_common.unique_name("bench-hybrid"))
        tier = _common.unlimited_rate_tier(tenant)
        kb = create_knowledge_base(tenant=tenant, name="hybrid-bench")
        version = kb.active_version
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [vs.INDEX_NAME])
            hnsw_present_at_load = bool(cursor.fetchone()[0])
        if args.drop_hnsw:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP INDEX IF EXISTS {vs.INDEX_NAME}")
            index_dropped = True
        started = time.perf_counter()
        vs.load_synthetic_documents(kb, passages, vectors, main_component, args.docs)
        copy_s = time.perf_counter() - started
        hnsw_build_s = None
        if index_dropped:
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('maintenance_work_mem', '1GB', false)")
            vector_index().ensure_index(384)
            index_dropped = False
            hnsw_build_s = round(time.perf_counter() - started, 1)
            print(f"HNSW rebuild: {hnsw_build_s} s", flush=True)
        with connection.cursor() as cursor:
            # knowledge_document too: Chunk's default ordering joins document/KB/tenant into the service's
            # chunk lookups, and with stale document stats PostgreSQL picked a nested loop that made the
            # "fuse" stage 14-22 ms instead of ~3 ms (run 1 of 2026-11-30); do not depend on autovacuum.
            cursor.execute("ANALYZE knowledge_chunk")
            cursor.execute("ANALYZE knowledge_document")
        print(f"COPY {args.chunks} rows in {copy_s:.1f} s (into a live HNSW index: {hnsw_present_at_load and not args.drop_hnsw})", flush=True)
        started = time.perf_counter()
        n_lex = rebuild_lexical_index(version)
        lex_s = time.perf_counter() - started
        print(f"rebuild_lexical_index: {n_lex} chunks in {lex_s:.1f} s", flush=True)
        result["load"] = {"chunks": args.chunks, "copy_s": round(copy_s, 1), "copy_rows_per_s": round(args.chunks / copy_s),
                          "hnsw_index_present_during_copy": hnsw_present_at_load and not args.drop_hnsw,
                          "hnsw_rebuild_s": hnsw_build_s,
                          "lexical_rebuild_s": round(lex_s, 1), "lexical_chunks": n_lex,
                          "lexical_chunks_per_s": round(n_lex / lex_s)}

        # --- in-process raw engine calls -------------------------------------------------------
        depth = settings.SEARCH_CANDIDATES
        scope = SearchScope(tenant_id=tenant.pk, version_ids=(version.pk,), embedding_dim=384)
        no_filter = compile_filters(None).sql
        vindex, lindex = PgVectorIndex(Chunk._meta.db_table), get_lexical_index()
        analyzer = analyzer_for_tenant(tenant.pk)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [vs.INDEX_NAME])
            result["hnsw_index_present_at_search"] = bool(cursor.fetchone()[0])
        inproc_queries = queries[:args.inprocess]
        result["inprocess"] = {}
        for config in configs:
            torch.set_num_threads(int(config))
            for q in queries[-10:]:
                vindex.search(scope, embedder.embed_query(q), depth, no_filter)
                lindex.search(version.pk, tenant.pk, analyzer.tokens(q), depth, None)
            t = {k: [] for k in ("embed_query", "embed_documents", "vector", "analyze", "bm25", "rrf", "sum", "sum_minus_embed")}
            for q in inproc_queries:
                t0 = time.perf_counter(); qv = embedder.embed_query(q); t1 = time.perf_counter()
                embedder.embed_documents([q]); t2 = time.perf_counter()
                vhits = vindex.search(scope, qv, depth, no_filter); t3 = time.perf_counter()
                tokens = analyzer.tokens(q); t4 = time.perf_counter()
                lhits = lindex.search(version.pk, tenant.pk, tokens, depth, None); t5 = time.perf_counter()
                reciprocal_rank_fusion([RankedList("vector", q, 1.0, [(h.chunk_id, h.score) for h in vhits]),
                                        RankedList("bm25", q, 1.0, [(h.chunk_id, h.score) for h in lhits])]); t6 = time.perf_counter()
                for k, v in (("embed_query", t1 - t0), ("embed_documents", t2 - t1), ("vector", t3 - t2),
                             ("analyze", t4 - t3), ("bm25", t5 - t4), ("rrf", t6 - t5)):
                    t[k].append(v)
                t["sum"].append((t1 - t0) + (t6 - t2))
                t["sum_minus_embed"].append(t6 - t2)
            result["inprocess"][config] = {"torch_threads": torch.get_num_threads(),
                                           **{k: _common.summarize_ms(v) for k, v in t.items()}}
            print(f"in-process TORCH_THREADS={config}: " + ", ".join(
                f"{k} {result['inprocess'][config][k]['p50_ms']}" for k in t), flush=True)

        # --- HTTP --------------------------------------------------------------------------------
        issued = create_api_key(tenant=tenant, name="bench")
        headers = {"Authorization": f"Bearer {issued.raw_key}"}
        result["http"] = {}
        for ci, config in enumerate(configs):
            port = _common.free_port()
            base = f"http://127.0.0.1:{port}"
            proc = _common.start_gunicorn(port, workdir / "gunicorn.log", {"TORCH_THREADS": config, "SEARCH_CACHE_TTL_S": "0"})
            _common.wait_ready(proc, base)
            off = 200 + ci * (args.warmup + args.requests)
            cq = [queries[(off + i) % len(queries)] for i in range(args.warmup + args.requests)]
            times = {m: [] for m in endpoints}
            server = {m: [] for m in endpoints}
            stages = {m: {} for m in endpoints}
            errors = {m: 0 for m in endpoints}
            cached_n = {m: 0 for m in endpoints}
            loads = []
            with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
                def call(q, mode):
                    t0 = time.perf_counter()
                    r = client.post(endpoints[mode], json={"query": q, "top_k": args.top_k, "rerank": False})
                    return time.perf_counter() - t0, r
                for q in cq[:args.warmup]:
                    for m in endpoints:
                        call(q, m)
                started = time.perf_counter()
                for i, q in enumerate(cq[args.warmup:]):
                    if time.perf_counter() - started > args.http_budget_s:
                        break
                    if i % 25 == 0:
                        loads.append(os.getloadavg()[0])
                    for m in (list(endpoints) if i % 2 == 0 else list(endpoints)[::-1]):
                        el, r = call(q, m)
                        if r.status_code != 200:
                            errors[m] += 1
                            continue
                        p = r.json()
                        times[m].append(el)
                        server[m].append(p.get("latency_ms", float("nan")) / 1000)
                        cached_n[m] += bool(p.get("cached"))
                        for s, ms in (p.get("timings_ms") or {}).items():
                            stages[m].setdefault(s, []).append(ms)
            _common.stop_process(proc)
            proc = None
            result["http"][config] = {
                m: {"client": _common.summarize_ms(times[m]), "server_latency": _common.summarize_ms(server[m]),
                    "errors": errors[m], "cached": cached_n[m],
                    "stage_p50_ms": {s: round(_common.percentile(v, 50), 2) for s, v in stages[m].items()}}
                for m in endpoints
            }
            result["http"][config]["loadavg_1m_during"] = [round(x, 2) for x in loads]
            ip = result["inprocess"][config]
            hy = result["http"][config]["hybrid"]["client"]["p50_ms"]
            result["http"][config]["overhead"] = {
                "hybrid_http_p50_over_raw_sum_p50": round(hy / ip["sum"]["p50_ms"], 2),
                "hybrid_http_p50_minus_raw_sum_p50_ms": round(hy - ip["sum"]["p50_ms"], 2),
                "hybrid_http_p50_minus_embed_p50_ms": round(hy - ip["embed_query"]["p50_ms"], 2),
                "bm25_http_p50_over_raw_p50": round(result["http"][config]["bm25"]["client"]["p50_ms"]
                                                    / (ip["analyze"]["p50_ms"] + ip["bm25"]["p50_ms"]), 2),
            }
            print(f"HTTP TORCH_THREADS={config}: " + repr({m: result['http'][config][m]['client'] for m in endpoints})
                  + f" stages {[result['http'][config][m]['stage_p50_ms'] for m in endpoints]} "
                  f"overhead {result['http'][config]['overhead']} load {loads}", flush=True)
        return 0
    finally:
        if proc is not None:
            _common.stop_process(proc)
        cleanup = _common.clean_up(
            result, tenant, tier, tenant_prefix="bench-hybrid", then=restore_hnsw if index_dropped else None
        )
        result["total_s"] = round(time.perf_counter() - t_start, 1)
        path = _common.write_result("hybrid_search", result)
        print(f"cleanup {cleanup}; wrote {path} (total {result['total_s']} s)")
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


def restore_hnsw() -> dict:
    from knowledge.stores import vector_index

    vector_index().ensure_index(384)
    return {"hnsw_restored": True}


if __name__ == "__main__":
    sys.exit(main())
