"""Filtered search at 100k-1M chunks, side by side with the engines a user would pick instead.
How to run it and what it costs: docs/BENCHMARKS.md, "How to run the 1M benchmark". One command:

    LC_ALL=C.UTF-8 .venv/bin/python -m bench.filtered_scale --rows 1000000 --peers lancedb,faiss

One throwaway tenant with ``--rows`` chunks, loaded by the production binary COPY, then its HNSW index
and keyword index built. ``--data synthetic`` (default): each row is ``normalize(a + 0.35 b + 0.1 g)`` of
two random SciFact passage vectors a, b and Gaussian noise g, its text a's passage (``bench.synthetic``).
Unlike real chunks, the rows are clusters of near-copies (about 190 per passage at 1M, HNSW's hard case)
whose texts repeat, and the filter fields are independent of the content. ``--data real``: SciFact's
passages and their sentences (about 49,000 real texts, the largest English set here), embedded once with
``--real-model`` (the int8 MiniLM; cached), the KB recorded with that model; ``--rows`` is capped there.

The filters (``bench.filtered_scale.peers``): a business field at 10 %, 1 % and 0.1 %, a date range (5 %)
and a tag ``in`` (2 %), plus none. For each:

* the vector engine (``PgVectorIndex.search`` at the service's depth, top 10 kept): p50/p95 and recall@10
  against the exact top-10 computed in numpy from the same vectors, for the defaults and each
  ``--variant`` (the levers: ``filter_sizing=estimate``, ``iterative_scan=strict_order``,
  ``max_scan_tuples=N``, ``ef_search=N``, ``exact_scan_threshold=N``) and each ``--build m=..,ef_construction=..``
  (``,ef_search=N``: searched with that setting, e.g. the previous defaults m 16 / 64 / 100 beside today's
  choice from the rows; ``--build-http``: also over HTTP while that build is the live index);
* rows touched: ``EXPLAIN (ANALYZE, BUFFERS)`` of the engine's count and nearest-rows statements (one query);
* where the time goes (``bench.harness.postgres``): per query, the nearest-rows statement's planning and
  execution in PostgreSQL against the whole engine call, and over HTTP each response's critical path by
  stage and the time outside the pipeline;
* ``search()`` in process and gunicorn over HTTP, in ``vector``, ``bm25`` and ``hybrid`` modes (result cache
  off, query embedding included, scenarios interleaved query by query);
* each ``--peers`` engine with the same query vectors, filters and k (their p50 and recall as ratios).
* ``--acl 10,1`` (``--reader-graphs 10``: then with graphs of their own), after the service's other parts: document ACLs that admit 10 % and 1 % of the chunks
  to a reader each and no row to everyone (``bench.filtered_scale.acl``); per reader the engine's p50 and
  recall@10 against the exact ACL-filtered top 10, and ``vector`` / ``hybrid`` over HTTP as that reader,
  as ratios to the unfiltered p50.

``--storage external`` (or main, plain) gives the vector column that storage before the load (the
service's default, main, keeps each vector in its row; external, pgvector's own, moves it to TOAST), so
the rows are written with it; the setting is put back after. ``--storage-ab S`` copies the rows into a
side table with storage S and times exact scans of both in turn per query; ``--lexical-ab`` times each
filtered bm25/hybrid search in process also with ``LEXICAL_FILTER_IN_INDEX`` off (the chunk ids read
from PostgreSQL), in turn.
Cleanup (always, unless --keep): gunicorn stopped, tenant deleted, the service's index rebuilt, the
peers' files removed. Writes bench/results/filtered_scale-<rows>-<data>-<date>.json and .md (the tables it prints).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import synthetic
from bench.filtered_scale import acl, growth, peers, report
from bench.filtered_scale.measure import searched_with, storage_ab
from bench.filtered_scale.peers import MODES
from bench.filtered_scale.rows import load_rows, real_texts
from bench.harness import datasets, http, postgres, project, results, server, throwaway
from bench.harness.stats import recall, timed, timed_in_turn

DIM = 384
LEVERS = {
    "exact_scan_threshold": int,
    "ef_search": int,
    "max_scan_tuples": int,
    "iterative_scan": str,
    "filter_sizing": str,
}


def parse_levers(text: str, allowed: dict) -> dict:
    """``key=value,key=value`` into keyword arguments of the engine."""
    out = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=", 1)
        if key not in allowed:
            raise SystemExit(f"unknown lever {key!r}: one of {', '.join(allowed)}")
        out[key] = allowed[key](value)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="chunks in the bench tenant (a multiple of 100)")
    parser.add_argument("--data", choices=["synthetic", "real"], default="synthetic")
    parser.add_argument(
        "--base-passages",
        type=int,
        help="SciFact passages the synthetic rows mix (default all 5,183; fewer for a smoke run)",
    )
    parser.add_argument("--real-model", default="all-MiniLM-L6-v2:onnx-int8", help="embedder of --data real")
    parser.add_argument(
        "--queries", type=int, default=100, help="SciFact queries per filter for recall and in-process timing"
    )
    parser.add_argument("--requests", type=int, default=60, help="timed HTTP requests per mode and filter")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument(
        "--no-keyword", action="store_true", help="no keyword index: vector engine, levers and peers only"
    )
    parser.add_argument(
        "--variant", action="append", default=[], help=f"engine levers key=value,...: {', '.join(LEVERS)}"
    )
    parser.add_argument(
        "--build",
        action="append",
        default=[],
        help="another service index: m=N,ef_construction=N[,ef_search=N] (ef_search: the setting HNSW_EF_SEARCH "
        "its searches use; unset: chosen from the rows), e.g. the previous defaults m=16,ef_construction=64,ef_search=100",
    )
    parser.add_argument(
        "--build-http",
        action="store_true",
        help="each --build also served over HTTP (vector and hybrid, every filter) while it is the live index",
    )
    parser.add_argument(
        "--acl",
        default="",
        help="percentages, e.g. 10,1: after the rest, document ACLs admitting that share of the chunks to a reader "
        "each (bench.filtered_scale.acl); the engine's recall@10 against the exact ACL-filtered top 10 and p50 "
        "over HTTP as each reader, as ratios to the unfiltered p50",
    )
    parser.add_argument(
        "--reader-graphs",
        default="",
        help="percentages among --acl's, e.g. 10: then those readers' principals get graphs of their own "
        "(manage.py reader_graph) and their figures are taken again",
    )
    parser.add_argument(
        "--storage", choices=["external", "extended", "main", "plain"], help="vector column storage for the load"
    )
    parser.add_argument(
        "--lexical-ab",
        action="store_true",
        help="in process, each filtered bm25/hybrid scenario also with LEXICAL_FILTER_IN_INDEX off, in turn",
    )
    parser.add_argument(
        "--storage-ab",
        choices=["external", "extended", "main", "plain"],
        help="also copy the rows into a side table with this vector storage and time exact scans of both, interleaved",
    )
    parser.add_argument("--peers", default="lancedb,faiss", help="comma list of lancedb, faiss, qdrant ('' for none)")
    parser.add_argument("--lancedb-index", choices=["ivf_hnsw_sq", "none"], default="ivf_hnsw_sq")
    parser.add_argument("--lancedb-ef", type=int, default=200)
    parser.add_argument("--lancedb-nprobes", type=int, default=20)
    parser.add_argument("--lancedb-refine", type=int, default=0, help="LanceDB refine_factor (0: none)")
    parser.add_argument("--faiss-m", type=int, default=16)
    parser.add_argument("--faiss-ef-construction", type=int, default=64)
    parser.add_argument("--faiss-ef-search", type=int, default=200)
    parser.add_argument("--faiss-exact-below", type=int, default=0, help="filters of up to this many rows: exact")
    parser.add_argument("--qdrant-max-rows", type=int, default=20_000)
    parser.add_argument("--peers-path", type=Path, help="a folder the peers were pip-installed into (--target)")
    parser.add_argument(
        "--growth",
        action="store_true",
        help="HTTP also at --growth-at rows during the load, ingestion into an empty KB and the big one",
    )
    parser.add_argument("--growth-at", type=int, default=100_000, help="the smaller size of --growth (rows)")
    parser.add_argument(
        "--growth-docs", type=int, default=4_150, help="SciFact documents --growth ingests (~10k chunks)"
    )
    parser.add_argument(
        "--milvus",
        default="",
        help="also Milvus at this URI (a server for the HTTP part; a file: Milvus Lite, engine calls only): the "
        "rows written to it from the chunk table, searched by the engine and over HTTP with VECTOR_BACKEND=milvus",
    )
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--keep", action="store_true", help="leave the tenant (prints its id); delete it by hand")
    args = parser.parse_args()
    if args.rows % peers.CHUNKS_PER_DOC:
        raise SystemExit(f"--rows must be a multiple of {peers.CHUNKS_PER_DOC}")
    if args.peers_path:
        project.add_packages(args.peers_path)
    variants = {"defaults": {}} | {text: parse_levers(text, LEVERS) for text in args.variant}
    builds = [parse_levers(text, {"m": int, "ef_construction": int, "ef_search": int}) for text in args.build]
    percents = acl.parse_percents(args.acl) if args.acl else ()

    project.setup_django()
    from django.conf import settings
    from django.db import connection
    from django.test import override_settings

    from engines.base import SearchScope
    from engines.embedders import get_embedder
    from engines.pgvector_index import PgVectorIndex, hnsw_index_name
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.models import Chunk
    from knowledge.stores import vector_index
    from retrieval.filters import compile_filters
    from retrieval.keyword_filter import exact_field_filter
    from retrieval.types import SearchRequest
    from tenants.services import create_api_key, create_tenant

    started_at, started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), time.perf_counter()
    run = results.run_info()
    command = "LC_ALL=C.UTF-8 " + run["command"]
    result: dict = {
        "command": command,
        "commit": run["commit"],
        "started": started_at,
        "machine": results.machine_info(),
    }
    result["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="bench-filtered-", dir=project.REPO_ROOT / "var"))
    tenant = tier = None
    engine_default = vector_index()
    depth = settings.SEARCH_CANDIDATES

    def execute(statement: str, params=None):
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else None

    try:
        passages, query_texts = datasets.scifact_passages_and_queries()
        query_texts = query_texts[-args.queries :]
        rng = np.random.default_rng(args.seed)
        if args.data == "real":
            embedder = get_embedder(args.real_model)
            texts = real_texts()
            args.rows = min(args.rows, len(texts) // peers.CHUNKS_PER_DOC * peers.CHUNKS_PER_DOC)
            texts = texts[: args.rows]
            all_vectors, embed_s, cached = datasets.embedded_passages(embedder, texts, cache=True)
            main_text = np.arange(args.rows)
        else:
            embedder = get_embedder()
            passages = passages[: args.base_passages]
            real, embed_s, cached = datasets.embedded_passages(embedder, passages, cache=True)
            texts = [p[:1000] for p in passages]
            all_vectors, main_text = synthetic.synthesize(real, args.rows, rng)
        all_vectors = np.asarray(all_vectors, dtype=np.float32)
        result["data"] = {
            "kind": args.data,
            "rows": args.rows,
            "model": embedder.model_name,
            "embed_s": round(embed_s, 1),
            "cached": cached,
        }
        queries = np.asarray(embedder.embed_queries(query_texts), dtype=np.float32)
        http_queries = query_texts * (1 + (args.warmup + args.requests) // len(query_texts))  # cycled
        fields = peers.Fields.of(np.arange(args.rows))
        truth = {flt.name: synthetic.exact_top_k(all_vectors, queries, 10, flt.mask(fields)) for flt in peers.FILTERS}

        tenant = create_tenant(results.unique_name("bench-filtered"))
        tier = throwaway.unlimited_rate_tier(tenant)
        kb = create_knowledge_base(
            tenant=tenant, name="filtered-bench", embedding_model=embedder.model_name if args.data == "real" else None
        )
        version = kb.active_version
        scope = SearchScope(tenant_id=tenant.pk, version_ids=(version.pk,), embedding_dim=DIM)
        key = create_api_key(tenant=tenant, name="bench").raw_key
        if args.storage:
            result["storage_was"] = engine_default.column_storage()
            engine_default.set_column_storage(args.storage)
        result["storage"] = engine_default.column_storage()

        def build_service_index(engine) -> dict:
            execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIM)}")
            execute("SET maintenance_work_mem = '4GB'")
            t0 = time.perf_counter()
            engine.ensure_index(DIM)
            seconds = time.perf_counter() - t0
            execute("RESET maintenance_work_mem")
            execute("ANALYZE knowledge_chunk")
            size = execute("SELECT pg_relation_size(%s::regclass)", [hnsw_index_name(DIM)])[0][0]
            from engines import pgvector_index

            pgvector_index._rows_in_index.cache_clear()  # the new index's rows choose ef_search from now
            m, ef_construction = engine.built_with(DIM) or (None, None)  # unset: chosen from the rows
            return {
                "build_s": round(seconds, 1),
                "index_mb": round(size / 2**20),
                "m": m,
                "ef_construction": ef_construction,
                "ef_search_at_depth_100": engine.search_list_size(DIM, 100),
            }

        if args.growth:  # before the load: the HNSW index is live and the table has no bench rows
            folder = growth.write_documents(workdir / "growth", args.growth_docs)
            result["growth"] = {"ingest": {"empty": growth.empty_rate(tenant, folder)}, "http": {}}
            print(f"  growth, into an empty KB: {result['growth']['ingest']['empty']}", flush=True)
        print(f"== {args.rows:,} {args.data} rows (load {os.getloadavg()[0]:.1f})", flush=True)
        execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIM)}")
        copy_s = 0.0
        smaller = [args.growth_at] if args.growth and 0 < args.growth_at < args.rows else []
        bounds = sorted({*range(0, args.rows, synthetic.SLICE_ROWS), *smaller, args.rows})
        for first, stop in zip(bounds, bounds[1:]):
            t0 = time.perf_counter()
            load_rows(kb, [texts[i] for i in main_text[first:stop]], all_vectors[first:stop], first)
            copy_s += time.perf_counter() - t0
            if stop in smaller:  # the same run's smaller size: its index, keyword index and HTTP figures
                execute("ANALYZE knowledge_chunk")
                build_service_index(engine_default)
                synthetic.build_keyword_index(version)
                result["growth"]["http"][str(stop)] = http_search(args, key, http_queries, workdir)
                print(f"  growth, HTTP at {stop:,} rows: {result['growth']['http'][str(stop)]}", flush=True)
                execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIM)}")
        result["copy_s"] = round(copy_s, 1)
        execute("ANALYZE knowledge_chunk")
        ids = np.array(
            [r[0] for r in execute("SELECT id FROM knowledge_chunk WHERE tenant_id = %s ORDER BY id", [tenant.pk])]
        )
        compiled = {flt.name: compile_filters(flt.service) for flt in peers.FILTERS}
        exact = {name: exact_field_filter(filters) for name, filters in compiled.items()}  # Milvus's filters
        for flt in peers.FILTERS:  # the numpy masks and PostgreSQL agree on every filter
            where, params = PgVectorIndex._where(scope, compiled[flt.name].sql)
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT count(*) FROM knowledge_chunk WHERE {where.as_string(cursor.cursor)}", params)
                if cursor.fetchone()[0] != int(flt.mask(fields).sum()):
                    raise RuntimeError(f"{flt.name}: SQL and numpy disagree on the matching rows")
        if not args.no_keyword:
            t0 = time.perf_counter()
            synthetic.build_keyword_index(version)
            result["lexical_rebuild_s"] = round(time.perf_counter() - t0, 1)

        def measure_engine(engine, cases: dict | None = None) -> dict:
            """Per case (default: the filters) p50/p95 and recall@10 against its exact top 10."""
            out = {}
            for name, (filters, exact_filter, exact_top) in (cases or filter_cases).items():
                stats, hits = timed(
                    lambda q, filters=filters, exact_filter=exact_filter: [
                        ids.searchsorted(h.chunk_id)
                        for h in engine.search(scope, q, depth, filters.sql, None, exact_filter)[:10]
                    ],
                    list(queries),
                )
                out[name] = {**stats, "recall_at_10": recall(hits, exact_top, 10)}
            return out

        filter_cases = {flt.name: (compiled[flt.name], exact[flt.name], truth[flt.name]) for flt in peers.FILTERS}

        result["service_index"] = build_service_index(engine_default)
        result["table"] = {
            "total_mb": round(execute("SELECT pg_total_relation_size('knowledge_chunk')")[0][0] / 2**20),
            "toast_mb": round(
                execute("SELECT pg_total_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'knowledge_chunk'")[
                    0
                ][0]
                / 2**20
            ),
        }
        print(f"  COPY {result['copy_s']} s, index {result['service_index']}, table {result['table']}", flush=True)
        result["matching_rows"] = {flt.name: int(flt.mask(fields).sum()) for flt in peers.FILTERS}
        result["rows_touched"] = {
            flt.name: postgres.rows_touched(engine_default, scope, compiled[flt.name], queries[0], depth)
            for flt in peers.FILTERS
        }
        if args.storage_ab:
            result["storage_ab"] = storage_ab(args.storage_ab, execute, scope, compiled, queries, depth)
            print(f"  storage A/B: {result['storage_ab']}", flush=True)
        result["variants"] = {}
        measure_engine(engine_default)  # untimed: the index just built is read into memory for every variant alike
        for name, levers in variants.items():
            result["variants"][name] = measure_engine(
                PgVectorIndex(Chunk._meta.db_table, **levers) if levers else engine_default
            )
            print(
                f"  engine {name}: "
                + ", ".join(f"{k} {v['p50_ms']} ms r {v['recall_at_10']}" for k, v in result["variants"][name].items()),
                flush=True,
            )

        result["statement_times"] = {
            flt.name: postgres.statement_times(
                engine_default, scope, compiled[flt.name], queries, depth, result["matching_rows"][flt.name]
            )
            for flt in peers.FILTERS
            if result["matching_rows"][flt.name]  # a filter no row matches runs no statement
        }
        print(f"  statement times: {result['statement_times']}", flush=True)
        if not args.no_keyword:
            result["in_process"] = {}
            # --lexical-ab: each filtered scenario also with the BM25 leg reading the chunk ids (the keyword
            # index not filtering), the two query by query in turn.
            ways = {"": {}} | ({" | ids": {"LEXICAL_FILTER_IN_INDEX": False}} if args.lexical_ab else {})
            with override_settings(SEARCH_CACHE_TTL_S=0):
                for flt in peers.FILTERS:
                    for mode in MODES:
                        calls = {
                            suffix: lambda text, mode=mode, flt=flt, changes=changes: searched_with(
                                changes, tenant, SearchRequest(query=text, mode=mode, top_k=10, filters=flt.service)
                            )
                            for suffix, changes in ways.items()
                            if not suffix or (flt.service and mode != "vector")
                        }
                        for suffix, stats in timed_in_turn(calls, query_texts).items():
                            result["in_process"][f"{mode} | {flt.name}{suffix}"] = stats
            print(f"  in process: {result['in_process']}", flush=True)
            if not args.no_http:
                result["http"] = http_search(args, key, http_queries, workdir)
                if args.growth:
                    result["growth"]["http"][str(args.rows)] = result["http"]
        postmaster = int(execute("SELECT pg_backend_pid()")[0][0])
        postmaster = int(Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()[1])
        result["postgres_rss_mb"] = round(postgres.PeakMemory(postmaster).sample() / 2**20)

        result["builds"] = {}
        for build_levers in builds:
            engine = PgVectorIndex(Chunk._meta.db_table, **build_levers)
            entry = build_service_index(engine)
            measure_engine(engine)  # untimed, as above
            entry["search"] = measure_engine(engine)
            entry["variants"] = {  # the search levers on this build too: recall at m x ef_search
                name: measure_engine(PgVectorIndex(Chunk._meta.db_table, **{**build_levers, **levers}))
                for name, levers in variants.items()
                if levers
            }
            if args.build_http and not args.no_http and not args.no_keyword:  # this build is the live index now
                ef_search = {"HNSW_EF_SEARCH": str(build_levers["ef_search"])} if "ef_search" in build_levers else {}
                entry["http"] = http_search(args, key, http_queries, workdir, ef_search, modes=("vector", "hybrid"))
            name = f"m={entry['m']} ef_construction={entry['ef_construction']}"
            if "ef_search" in build_levers:
                name += f" ef_search={build_levers['ef_search']}"
            result["builds"][name] = entry
            print(f"  build {entry}", flush=True)
        if builds and not percents:  # --acl drops and rebuilds the service index itself
            result["service_index_rebuilt"] = build_service_index(engine_default)

        if args.milvus:
            result["milvus"] = milvus_run(args, tenant, scope, measure_engine, key, http_queries, workdir)
            print(f"  milvus: {result['milvus']}", flush=True)

        if percents:  # last of the service's parts: from here no row is open to everyone (`*`)
            result["acl"] = acl.run(
                args,
                percents,
                tenant=tenant,
                kb=kb,
                execute=execute,
                build_index=build_service_index,
                measure_engine=measure_engine,
                vectors=all_vectors,
                queries=queries,
                unfiltered=filter_cases["none"],
                http_search=http_search,
                http_unfiltered=(result.get("http") or {}).get("scenarios", {}),
                http_queries=http_queries,
                workdir=workdir,
                graphs=acl.parse_percents(args.reader_graphs) if args.reader_graphs else (),
            )
            result["service_index_rebuilt"] = result["acl"].pop("service_index")
            print(f"  acl: {result['acl']}", flush=True)

        result["peers"] = {}
        for name in filter(None, args.peers.split(",")):
            if name == "qdrant" and args.rows > args.qdrant_max_rows:
                result["peers"][name] = {
                    "skipped": f"{args.rows:,} rows > --qdrant-max-rows (local mode is for small sets)"
                }
                continue
            peer = {
                "lancedb": lambda: peers.LanceDBPeer(
                    workdir, args.lancedb_index, args.lancedb_ef, args.lancedb_nprobes, args.lancedb_refine
                ),
                "faiss": lambda: peers.FaissPeer(
                    args.faiss_m, args.faiss_ef_construction, args.faiss_ef_search, args.faiss_exact_below
                ),
                "qdrant": peers.QdrantLocalPeer,
            }[name]()
            entry = {"engine": peer.name, "build": peer.build(all_vectors, fields)}
            for flt in peers.FILTERS:
                stats, hits = timed(lambda q, flt=flt, peer=peer: peer.search(q, flt, fields, 10), list(queries))
                entry[flt.name] = {**stats, "recall_at_10": recall(hits, truth[flt.name], 10)}
            result["peers"][name] = entry
            print(
                f"  {peer.name}: "
                + ", ".join(
                    f"{f.name} {entry[f.name]['p50_ms']} ms r {entry[f.name]['recall_at_10']}" for f in peers.FILTERS
                ),
                flush=True,
            )
            del peer
        if args.growth:  # last: the new rows are not in the numpy truth the searches above were judged by
            result["growth"]["ingest"]["full"] = growth.ingest_rate(kb, folder)
            print(f"  growth, into the {args.rows:,}-row KB: {result['growth']['ingest']['full']}", flush=True)
        return 0
    finally:
        if args.keep and tenant is not None:
            print(f"kept tenant {tenant.pk} (delete it with its knowledge base by hand)")
            tenant = None
        if tenant is not None:
            execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIM)}")
            for table in ("knowledge_graphmention", "knowledge_graphpassagerelations"):  # --growth's graph rows
                execute(
                    f"DELETE FROM {table} WHERE chunk_id IN (SELECT id FROM knowledge_chunk WHERE tenant_id = %s)",
                    [tenant.pk],
                )
            execute("DELETE FROM knowledge_chunk WHERE tenant_id = %s", [tenant.pk])

            def restore() -> dict:
                execute("VACUUM ANALYZE knowledge_chunk")
                engine_default.ensure_index(DIM)
                engine_default.set_column_storage(settings.VECTOR_COLUMN_STORAGE)
                return {"service_index_restored": True, "storage": engine_default.column_storage()}

            throwaway.clean_up(result, tenant, tier, tenant_prefix="bench-filtered", then=restore)
        shutil.rmtree(workdir, ignore_errors=True)
        result["total_s"] = round(time.perf_counter() - started, 1)
        result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        if "variants" in result:
            # one file per size and data of a day: the 1M run and the real-text run do not overwrite each other
            path = results.write_result(f"filtered_scale-{args.rows}-{args.data}", result)
            markdown = render(result)
            path.with_suffix(".md").write_text(markdown)
            print(markdown)
            print(f"wrote {path} and {path.with_suffix('.md').name} (total {result['total_s']} s)")


def milvus_run(args, tenant, scope, measure_engine, key: str, queries: list[str], workdir: Path) -> dict:
    """The tenant's rows written to Milvus from the chunk table (as ``rebuild_vector_index`` does), the
    engine's p50 and recall@10 per filter as pgvector's above, and (a server URI) every mode x filter over
    HTTP with ``VECTOR_BACKEND=milvus``; the vectors deleted after."""
    from engines.milvus_index import MilvusVectorIndex
    from knowledge.models import Chunk
    from knowledge.stores import chunk_rows_of

    milvus = MilvusVectorIndex(Chunk._meta.db_table, args.milvus, timeout_s=3600)
    try:
        t0 = time.perf_counter()
        written = milvus.rewrite(chunk_rows_of(Chunk.objects.filter(tenant_id=tenant.pk)))
        out: dict = {"uri": args.milvus, "rows": written, "write_s": round(time.perf_counter() - t0, 1)}
        measure_engine(milvus)  # untimed: loads the collection's segments
        out["search"] = measure_engine(milvus)
        if "://" in args.milvus and not args.no_http and not args.no_keyword:
            environment = {"VECTOR_BACKEND": "milvus", "MILVUS_URI": args.milvus}
            out["http"] = http_search(args, key, queries, workdir, environment)
        return out
    finally:
        for version_id in scope.version_ids:
            milvus.drop_version(version_id)


def http_search(
    args,
    key: str,
    queries: list[str],
    workdir: Path,
    environment: dict[str, str] | None = None,
    *,
    modes: tuple[str, ...] = MODES,
    scenarios: list[http.Scenario] | None = None,
) -> dict:
    """Every mode x filter (or ``scenarios``) over HTTP on one gunicorn as ``./run serve`` starts it
    (result cache off)."""
    from django.urls import reverse

    scenarios = scenarios or [
        http.Scenario(
            f"{mode} | {flt.name}",
            reverse(f"retrieval-{mode}"),
            {"rerank": False, **({"filters": flt.service} if flt.service else {})},
        )
        for flt in peers.FILTERS
        for mode in modes
    ]
    with server.gunicorn(workdir / "gunicorn.log", {"SEARCH_CACHE_TTL_S": "0", **(environment or {})}) as (
        base_url,
        proc,
    ):
        out = http.http_run(base_url, key, scenarios, queries[: args.warmup + args.requests], warmup=args.warmup)
        out["gunicorn_rss_mb"] = round(server.tree_rss(proc.pid) / 2**20)
    return out


def render(result: dict) -> str:
    """The run as markdown tables: machine, load, date, command, then one table per part."""
    return report.render_markdown(result)


if __name__ == "__main__":
    sys.exit(main())
