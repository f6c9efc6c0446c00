"""Vector search latency over HTTP at 100k synthetic chunks (with and without filters) and HNSW recall@10.

    .venv/bin/python -m bench.vector_search --chunks 100000 --requests 300 --recall-queries 200

The rows are ``bench.synthetic``'s (the 5,183 SciFact passages embedded once, cached under
bench/results/cache/): 1,000 documents x 100 chunks, with ``doc_type`` and metadata fields to filter on
20 %, 5 % and 0.5 % of the rows. The HNSW index is dropped before the load and rebuilt after it.

Measured: query embedding alone, ``PgVectorIndex.search`` per filter (exact vs forced HNSW), HTTP
latency through gunicorn (result cache off, scenarios interleaved query by query) and recall@10 of
HNSW against exact search in the same scope. Cleanup (always): gunicorn stopped, tenant deleted, HNSW
index rebuilt over the remaining rows. Writes bench/results/vector_search-<date>.json. The plans, the HTTP
run and the recall are measured in ``bench.vector_search.measure``; the tables are printed by
``bench.vector_search.report``, which also reads them back from a result's JSON.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import synthetic
from bench.harness import datasets, project, results, stats, throwaway
from bench.vector_search import report

SCENARIOS = {
    "no filter": None,
    "doc_type = pdf (20 %)": {"doc_type": "pdf"},
    "metadata.shop_id = 3 (5 %)": {"metadata.shop_id": 3},
    "metadata.campaign_id = 7 (0.5 %)": {"metadata.campaign_id": 7},
}
RECALL_SCENARIOS = ["no filter", "metadata.shop_id = 3 (5 %)", "metadata.campaign_id = 7 (0.5 %)"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=1000, help="documents to spread the chunks over")
    parser.add_argument("--requests", type=int, default=300, help="timed HTTP requests per scenario")
    parser.add_argument("--warmup", type=int, default=20, help="untimed HTTP requests per scenario first")
    parser.add_argument("--inprocess", type=int, default=100, help="queries for the in-process timings")
    parser.add_argument("--recall-queries", type=int, default=200)
    parser.add_argument("--ef", default="40,100,200", help="ef_search values for recall")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--torch-threads",
        default="1,2",
        help="comma list of TORCH_THREADS values for the server (and the in-process embedding timing); "
        "'default' = leave TORCH_THREADS unset (the server then uses its gunicorn config's default, the "
        "in-process timing settings.TORCH_THREADS)",
    )
    parser.add_argument(
        "--server-cache",
        action="store_true",
        help="leave the service's result cache on (default: SEARCH_CACHE_TTL_S=0 for the server)",
    )
    parser.add_argument("--http-budget-s", type=float, default=180, help="cap on timed HTTP seconds per config")
    parser.add_argument("--maintenance-work-mem", default="1GB", help="session setting for the HNSW build")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--no-cache", action="store_true", help="do not read/write the real-vector cache")
    results.add_wait_quiet(parser)
    args = parser.parse_args()
    load_at_start = results.wait_for_quiet(args.wait_quiet)
    ef_values = [int(x) for x in args.ef.split(",") if x.strip()]
    thread_configs = [x.strip() for x in args.torch_threads.split(",") if x.strip()]

    project.setup_django()
    import logging

    from django.conf import settings
    from django.db import DatabaseError, connection
    from django.urls import reverse

    from bench.vector_search import measure  # its module level imports the project
    from engines.base import SearchScope
    from engines.embedders import get_embedder
    from engines.pgvector_index import PgVectorIndex
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.models import Chunk
    from knowledge.stores import vector_index
    from retrieval.filters import compile_filters
    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    # Fail fast (before the expensive load) when the URLconf does not import, e.g. mid-edit code.
    endpoint = reverse("retrieval-vector")

    result: dict = {
        "config": vars(args),
        "machine": results.machine_info(),
        "endpoint": endpoint,
        "code": results.code_fingerprint(
            [
                "retrieval/services",
                "retrieval/views.py",
                "engines/pgvector_index.py",
                "engines/embedders/sentence_transformers_embedder.py",
                "knowledge/ingestion/chunk_rows.py",
                "retrieval_site/settings",
            ]
        ),
    }
    result["loadavg_1m_at_start"] = round(load_at_start, 2)
    tier = None
    tenant = None
    index_dropped = False
    workdir = Path(tempfile.mkdtemp(prefix="bench-vector-"))
    t_start = time.perf_counter()
    try:
        # --- 1. real vectors ----------------------------------------------------------------------
        passages, queries = datasets.scifact_passages_and_queries()
        started = time.perf_counter()
        embedder = get_embedder()
        result["model"] = embedder.model_name
        result["model_load_s"] = round(time.perf_counter() - started, 2)
        embedder.embed_documents(passages[:32])  # warm-up
        real, embed_s, cached = datasets.embedded_passages(embedder, passages, cache=not args.no_cache)
        result["real_passages"] = {"count": len(real), "embed_s": round(embed_s, 1), "from_cache": cached}
        if not cached:
            result["real_passages"]["passages_per_s"] = round(len(real) / embed_s, 1)
        print(
            f"real vectors: {len(real)} SciFact passages "
            f"({'from cache' if cached else f'embedded in {embed_s:.0f} s, {len(real) / embed_s:.1f}/s'})",
            flush=True,
        )

        # --- 2. synthetic rows ----------------------------------------------------------------------
        rng = np.random.default_rng(args.seed)
        vectors, main_component = synthetic.synthesize(real, args.chunks, rng)
        if args.chunks % args.docs:
            raise SystemExit("--chunks must be a multiple of --docs")
        contents = [p[:1000] for p in passages]

        tenant = create_tenant(results.unique_name("bench-vector"))
        tier = throwaway.unlimited_rate_tier(tenant)
        kb = create_knowledge_base(tenant=tenant, name="vector-bench")
        version = kb.active_version
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {synthetic.INDEX_NAME}")
            index_dropped = True
        started = time.perf_counter()
        synthetic.load_synthetic_documents(kb, contents, vectors, main_component, args.docs)
        copy_s = time.perf_counter() - started
        print(f"COPY {args.chunks} rows in {copy_s:.1f} s ({args.chunks / copy_s:,.0f} rows/s)", flush=True)

        with connection.cursor() as cursor:
            cursor.execute("SHOW maintenance_work_mem")
            default_mwm = cursor.fetchone()[0]
            cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [args.maintenance_work_mem])
            cursor.execute("SELECT count(*) FROM knowledge_chunk WHERE embedding_dim = 384")
            indexed_rows = cursor.fetchone()[0]
            started = time.perf_counter()
            vector_index().ensure_index(384)
            index_dropped = False
            build_s = time.perf_counter() - started
            cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [default_mwm])
            started = time.perf_counter()
            cursor.execute("ANALYZE knowledge_chunk")
            analyze_s = time.perf_counter() - started
            cursor.execute(
                "SELECT pg_relation_size(%s), pg_total_relation_size('knowledge_chunk')", [synthetic.INDEX_NAME]
            )
            index_bytes, table_bytes = cursor.fetchone()
        print(
            f"HNSW build over {indexed_rows} rows: {build_s:.1f} s (maintenance_work_mem {args.maintenance_work_mem}, "
            f"default {default_mwm}); index {index_bytes / 1e6:.0f} MB; ANALYZE {analyze_s:.1f} s",
            flush=True,
        )
        result["load"] = {
            "chunks": args.chunks,
            "documents": args.docs,
            "copy_s": round(copy_s, 2),
            "copy_rows_per_s": round(args.chunks / copy_s),
            "hnsw_rows_indexed": indexed_rows,
            "hnsw_build_s": round(build_s, 1),
            "hnsw_build_maintenance_work_mem": args.maintenance_work_mem,
            "server_default_maintenance_work_mem": default_mwm,
            "hnsw_index_mb": round(index_bytes / 1e6, 1),
            "table_total_mb": round(table_bytes / 1e6, 1),
            "analyze_s": round(analyze_s, 2),
        }

        scope = SearchScope(tenant_id=tenant.pk, version_ids=(version.pk,), embedding_dim=384)
        compiled = {name: compile_filters(f) for name, f in SCENARIOS.items()}
        selectivity = {}
        for name in SCENARIOS:
            n = compiled[name].apply(Chunk.objects.filter(tenant_id=tenant.pk, kb_version_id=version.pk)).count()
            selectivity[name] = n
        result["scenario_rows"] = selectivity
        result["settings"] = {
            "VECTOR_EXACT_SCAN_THRESHOLD": settings.VECTOR_EXACT_SCAN_THRESHOLD,
            "HNSW_EF_SEARCH": settings.HNSW_EF_SEARCH,
            "TORCH_THREADS": settings.TORCH_THREADS,
            "EMBEDDING_BATCH_SIZE": settings.EMBEDDING_BATCH_SIZE,
        }

        # --- 3. in-process: query embedding, index search, plans -------------------------------------
        timed_queries = queries[args.warmup : args.warmup + args.requests]
        import torch

        for q in queries[: args.warmup]:
            embedder.embed_query(q)
        qvecs = [embedder.embed_query(q) for q in timed_queries[: args.inprocess]]
        embedding_by_config = {}
        for config in thread_configs:
            torch.set_num_threads(settings.TORCH_THREADS if config == "default" else int(config))
            for q in queries[:5]:
                embedder.embed_query(q)
            times = []
            for q in timed_queries[: args.inprocess]:
                started = time.perf_counter()
                embedder.embed_query(q)
                times.append(time.perf_counter() - started)
            embedding_by_config[config] = {"torch_threads": torch.get_num_threads(), **stats.summarize_ms(times)}
            print(
                f"in-process query embedding, torch threads {torch.get_num_threads()}: "
                f"p50 {embedding_by_config[config]['p50_ms']} ms",
                flush=True,
            )
        torch.set_num_threads(settings.TORCH_THREADS)
        result["inprocess_query_embedding"] = embedding_by_config
        depth = settings.SEARCH_CANDIDATES
        exact_index = PgVectorIndex(Chunk._meta.db_table, exact_scan_threshold=10**9)
        forced_hnsw = PgVectorIndex(Chunk._meta.db_table, exact_scan_threshold=1)

        def timed_search(idx, name, n):
            times = []
            for qv in qvecs[:n]:
                started = time.perf_counter()
                idx.search(scope, qv, depth, compiled[name].sql)
                times.append(time.perf_counter() - started)
            return stats.summarize_ms(times)

        # A bulk COPY leaves the new rows in the GIN indexes' pending lists (fastupdate), which every
        # filtered search scans until (auto)vacuum merges them; measure that, then merge them.
        rare = "metadata.campaign_id = 7 (0.5 %)"
        timed_search(exact_index, rare, 5)
        gin = {"exact_search_before": timed_search(exact_index, rare, 50)}
        with connection.cursor() as cursor:
            for gin_index in ("chunk_metadata_gin", "chunk_tags_gin"):
                try:
                    cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [gin_index])
                    gin[f"{gin_index}_pending_pages_merged"] = cursor.fetchone()[0]
                except DatabaseError as exc:
                    gin[f"{gin_index}_error"] = str(exc)
        gin["exact_search_after"] = timed_search(exact_index, rare, 50)
        result["gin_pending_list"] = gin
        print(
            f"GIN pending list after the bulk load: {gin.get('chunk_metadata_gin_pending_pages_merged')} pages; "
            f"exact search ({rare}, k={depth}) p50 {gin['exact_search_before']['p50_ms']} ms before merging, "
            f"{gin['exact_search_after']['p50_ms']} ms after",
            flush=True,
        )

        index = PgVectorIndex(Chunk._meta.db_table)
        # The service asks each retriever for SEARCH_CANDIDATES rows (then fuses/dedups to top_k).
        depths = sorted({args.top_k, depth})
        search_times = {(name, k): [] for name in SCENARIOS for k in depths}
        for name in SCENARIOS:  # warm-up
            for qv in qvecs[:5]:
                for k in depths:
                    index.search(scope, qv, k, compiled[name].sql)
        for i, qv in enumerate(qvecs):
            names = list(SCENARIOS)
            names = names[i % len(names) :] + names[: i % len(names)]
            for name in names:
                for k in depths:
                    started = time.perf_counter()
                    index.search(scope, qv, k, compiled[name].sql)
                    search_times[(name, k)].append(time.perf_counter() - started)
        result["inprocess_index_search"] = {
            name: {f"k={k}": stats.summarize_ms(search_times[(name, k)]) for k in depths} for name in SCENARIOS
        }
        result["service_candidate_depth"] = depth

        # Exact scan vs HNSW at the service's depth, per scope: where should the exact threshold sit?
        result["inprocess_exact_vs_hnsw"] = {
            name: {
                "exact": timed_search(exact_index, name, args.inprocess),
                "hnsw": timed_search(forced_hnsw, name, args.inprocess),
            }
            for name in SCENARIOS
        }

        # PgVectorIndex first sizes the filter (counts matching rows up to its exact-scan limit + 1) to pick
        # exact or HNSW: a fixed cost of every search, timed alone.
        probe_times = {name: [] for name in SCENARIOS}
        for _ in range(args.inprocess):
            for name in SCENARIOS:
                started = time.perf_counter()
                index.plan(scope, compiled[name].sql)
                probe_times[name].append(time.perf_counter() - started)
        result["inprocess_count_probe"] = {name: stats.summarize_ms(t) for name, t in probe_times.items()}

        plans = measure.search_plans(scope, compiled, qvecs[0], args.top_k)
        result["plans"] = plans

        # --- 4. HTTP ----------------------------------------------------------------------------------
        key = create_api_key(tenant=tenant, name="bench").raw_key
        result["http"] = {}
        per_config = args.warmup + args.requests
        for at, config in enumerate(thread_configs):  # each config its own queries: none seen by an earlier one
            config_queries = [queries[(at * per_config + i) % len(queries)] for i in range(per_config)]
            http = measure.http_latency(
                config, args=args, queries=config_queries, endpoint=endpoint, key=key, scenarios=SCENARIOS,
                workdir=workdir,
            )  # fmt: skip
            result["http"][config] = http
            print(
                f"HTTP with TORCH_THREADS={config}: done ({http['scenarios']['no filter']['n']} requests "
                f"per scenario{', time budget hit' if http['time_budget_hit'] else ''})",
                flush=True,
            )

        # --- 5. recall@10: HNSW vs exact ---------------------------------------------------------------
        recall_vecs = embedder.embed_documents(queries[-args.recall_queries :])
        recall_scopes = {name: compiled[name] for name in RECALL_SCENARIOS}
        recall = measure.hnsw_recall(scope, recall_scopes, recall_vecs, ef_values, args.top_k)
        result["recall"] = {"queries": len(recall_vecs), "k": args.top_k, "by_scenario": recall}
        report.print_report(result)
        return 0
    finally:
        cleanup = {}
        cleanup_error = None
        from django.db import DatabaseError, connection

        try:
            if tenant is not None or index_dropped:
                # Drop the HNSW index before the mass delete: no graph vacuum over 100k dead rows, and no
                # CREATE INDEX that has to read just-deleted TOASTed rows (that once failed with "missing
                # chunk number 0 for toast value" while autovacuum was processing the TOAST table).
                with connection.cursor() as cursor:
                    cursor.execute(f"DROP INDEX IF EXISTS {synthetic.INDEX_NAME}")
                index_dropped = True
            if tenant is not None:
                started = time.perf_counter()
                tenant.delete()
                cleanup["tenant_delete_s"] = round(time.perf_counter() - started, 1)
            if tier is not None:
                tier.delete()
            if index_dropped:
                started = time.perf_counter()
                with connection.cursor() as cursor:
                    cursor.execute("VACUUM ANALYZE knowledge_chunk")
                    for attempt in range(1, 4):
                        try:
                            vector_index().ensure_index(384)
                            break
                        except DatabaseError as exc:
                            print(
                                f"WARNING: rebuilding {synthetic.INDEX_NAME} failed (attempt {attempt}): {exc}",
                                file=sys.stderr,
                            )
                            if attempt == 3:
                                raise
                            time.sleep(5)
                            cursor.execute("VACUUM knowledge_chunk")
                index_dropped = False
                cleanup["vacuum_and_index_rebuild_s"] = round(time.perf_counter() - started, 1)
        except Exception as exc:  # reported below, then re-raised
            cleanup_error = exc
            cleanup["error"] = repr(exc)
            print(
                f"CLEANUP FAILED: {exc!r}. Restore with: .venv/bin/python manage.py shell -c "
                "'from knowledge.stores import vector_index; vector_index().ensure_index(384)' "
                "and delete any tenant named bench-vector-*",
                file=sys.stderr,
            )
        print(f"cleanup: {cleanup}")
        result["cleanup"] = cleanup
        result["total_s"] = round(time.perf_counter() - t_start, 1)
        if "recall" in result:
            path = results.write_result("vector_search", result)
            print(f"wrote {path} (total {result['total_s']} s)")
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
        if cleanup_error is not None and sys.exc_info()[0] is None:
            raise cleanup_error


if __name__ == "__main__":
    sys.exit(main())
