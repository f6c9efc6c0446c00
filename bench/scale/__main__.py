"""Scale to 1M chunks: HNSW build cost, storage (vector vs halfvec), recall@10 and latency over HTTP.
Current figures and the command: docs/BENCHMARKS.md, "Scale to 1M chunks". Filtered search with BM25 and
hybrid, the levers and the peer engines on the same vectors: ``bench.filtered_scale``.

    LC_ALL=C.UTF-8 .venv/bin/python -m bench.scale --sizes 100000,1000000 --grid vector:16:64:1000000 \
        --grid-from 1000000 --requests 60 --warmup 5 --recall-queries 100 --max-exact-rows 50000
    .venv/bin/python -m bench.scale --sizes 1000000 --grid '' --keep     # then --reuse <tenant id>

Data: ``bench.synthetic``'s rows (real SciFact vectors mixed, each row's text a real
passage) with filter fields ``metadata.segment`` (10 %), ``campaign`` (1 %) and ``cohort`` (0.1 %). One
throwaway tenant grows through ``--sizes`` by binary COPY; every HNSW index is dropped before a load and
built after it, and the keyword index is rebuilt with each distinct passage analyzed once
(:func:`build_keyword_index`).

At each size: each ``--grid`` variant (``storage:m:ef_construction:largest size``) is built alone (time,
peak memory of the PostgreSQL processes, size), searched as the engine searches and dropped; the
service's own index is built and searched through ``PgVectorIndex.search``; each filter is searched
forced exact and forced through the graph, interleaved (the data behind ``VECTOR_EXACT_SCAN_THRESHOLD``);
then gunicorn answers real queries with and without filters, the scenarios interleaved. Recall@10 is
against the exact top-10 computed in numpy from the same vectors.

Cleanup (always, unless --keep): gunicorn stopped, bench indexes dropped, rows and tenant deleted, the
service's index rebuilt. Writes bench/results/scale-<date>.json. What it measures at each size besides the
builds is in ``bench.scale.measure``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import synthetic
from bench.harness import datasets, http, postgres, project, results, server, throwaway
from bench.scale import measure
from bench.synthetic import DIM, SLICE_ROWS

CHUNKS_PER_DOC = 100
FILTERS = {"10 %": {"metadata.segment": 3}, "1 %": {"metadata.campaign": 7}, "0.1 %": {"metadata.cohort": 7}}
HTTP_SCENARIOS = [  # (name, endpoint, filter)
    ("vector", "retrieval-vector", None),
    ("vector 10 %", "retrieval-vector", "10 %"),
    ("vector 1 %", "retrieval-vector", "1 %"),
    ("hybrid", "retrieval-hybrid", None),
    ("hybrid 10 %", "retrieval-hybrid", "10 %"),
    ("hybrid 1 %", "retrieval-hybrid", "1 %"),
]


def business_fields(row):
    """Filterable fields of synthetic row ``row`` (an int, or an array of them): one value of ``segment``
    selects 10 % of the rows, one of ``campaign`` 1 %, one of ``cohort`` 0.1 %."""
    return {"segment": row % 10, "campaign": row % 100, "cohort": row % 1000}


def filter_mask(name: str | None, rows: int) -> np.ndarray:
    """Which of rows 0..rows-1 pass the named filter of :data:`FILTERS`."""
    if name is None:
        return np.ones(rows, dtype=bool)
    ((field, value),) = FILTERS[name].items()
    return business_fields(np.arange(rows))[field.removeprefix("metadata.")] == value


@dataclasses.dataclass(frozen=True)
class Variant:
    storage: str  # vector | halfvec
    m: int
    ef_construction: int
    largest_size: int  # built at the sizes up to this one (the big builds are the expensive part)

    @classmethod
    def parse(cls, text: str) -> Variant:
        storage, m, efc, largest = text.split(":")
        if storage not in ("vector", "halfvec"):
            raise ValueError(f"storage must be vector or halfvec, not {storage!r}")
        return cls(storage, int(m), int(efc), int(largest))

    @property
    def name(self) -> str:
        return f"bench_scale_{self.storage}_m{self.m}_efc{self.ef_construction}"

    @property
    def label(self) -> str:
        return f"{self.storage} m={self.m} ef_c={self.ef_construction}"

    def ddl(self) -> str:
        return (
            f"CREATE INDEX {self.name} ON knowledge_chunk USING hnsw "
            f"((embedding::{self.storage}({DIM})) {self.storage}_cosine_ops) "
            f"WITH (m = {self.m}, ef_construction = {self.ef_construction}) WHERE embedding_dim = {DIM}"
        )


def http_search(args, key: str, queries: list[str], workdir: Path) -> dict:
    """The :data:`HTTP_SCENARIOS` over HTTP on one gunicorn like ``./run serve`` (result cache off)."""
    from django.urls import reverse

    scenarios = [
        http.Scenario(name, reverse(endpoint), {"rerank": False, **({"filters": FILTERS[flt]} if flt else {})})
        for name, endpoint, flt in HTTP_SCENARIOS
    ]
    with server.gunicorn(workdir / "gunicorn.log", {"SEARCH_CACHE_TTL_S": "0"}) as (base_url, _):
        return http.http_run(base_url, key, scenarios, queries, warmup=args.warmup, top_k=args.top_k)["scenarios"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,300000,1000000", help="ascending row counts")
    parser.add_argument(
        "--grid",
        default="vector:16:64:300000,halfvec:16:64:300000",
        help="comma list of storage:m:ef_construction:largest_size variants built by the bench "
        "besides the service's own index ('' for none)",
    )
    parser.add_argument("--grid-from", type=int, default=0, help="build the grid variants only at sizes from this one")
    parser.add_argument("--recall-queries", type=int, default=200)
    parser.add_argument("--requests", type=int, default=100, help="timed HTTP requests per scenario and size")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--maintenance-work-mem", default="4GB")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument(
        "--vector-only",
        action="store_true",
        help="no keyword index and no HTTP: builds, recall and in-process searches only",
    )
    parser.add_argument(
        "--threshold-queries",
        type=int,
        default=30,
        help="queries per filter for the exact-vs-HNSW comparison (0: skip it)",
    )
    parser.add_argument(
        "--max-exact-rows",
        type=int,
        default=200_000,
        help="filters matching more rows are not scanned exactly in that comparison",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave the tenant, its rows and indexes for a later --reuse (prints its id)"
    )
    parser.add_argument(
        "--reuse",
        type=int,
        metavar="TENANT_ID",
        help="a tenant a --keep run left: no load or builds, the exact-vs-HNSW comparison and "
        "HTTP on its rows as they are, then the cleanup (unless --keep)",
    )
    args = parser.parse_args()
    sizes = sorted(int(x) for x in args.sizes.split(",") if x.strip())
    grid = [Variant.parse(x) for x in args.grid.split(",") if x.strip()]
    if any(size % CHUNKS_PER_DOC for size in sizes):
        raise SystemExit(f"sizes must be multiples of {CHUNKS_PER_DOC}")

    project.setup_django()
    import logging

    from django.conf import settings
    from django.db import connection, transaction

    from engines.base import SearchScope
    from engines.embedders import get_embedder
    from engines.hnsw_parameters import ef_search_for
    from engines.pgvector_index import hnsw_index_name, register_vector_type
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.models import Chunk
    from knowledge.stores import vector_index
    from retrieval.filters import compile_filters
    from tenants.models import Tenant
    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    service_index = hnsw_index_name(DIM)
    depth = settings.SEARCH_CANDIDATES
    # a variant's walk gets the ef_search the service gives a search of this depth (HNSW_EF_SEARCH, or
    # unset: chosen from the index's rows when the walk runs; engines.hnsw_parameters)
    fixed_ef_search = max(settings.HNSW_EF_SEARCH, 2 * depth) if settings.HNSW_EF_SEARCH else None
    result: dict = {
        "config": vars(args),
        "machine": results.machine_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "settings": {
            "SEARCH_CANDIDATES": depth,
            "HNSW_EF_SEARCH": settings.HNSW_EF_SEARCH,
            "VECTOR_EXACT_SCAN_THRESHOLD": settings.VECTOR_EXACT_SCAN_THRESHOLD,
            "EMBEDDING_BACKEND": settings.EMBEDDING_BACKEND,
        },
        "code": results.code_fingerprint(["engines/pgvector_index.py", "retrieval/services"]),
        "sizes": {},
    }
    tenant = tier = None
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    started_all = time.perf_counter()

    def execute(statement: str, params=None):
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else None

    def drop_hnsw_indexes() -> None:
        for (name,) in execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'knowledge_chunk' AND indexdef LIKE '%%USING hnsw%%'"
        ):
            execute(f'DROP INDEX IF EXISTS "{name}"')

    def timed_build(build) -> dict:
        execute("SELECT set_config('maintenance_work_mem', %s, false)", [args.maintenance_work_mem])
        execute("SET max_parallel_maintenance_workers = 2")
        postmaster = int(execute("SELECT pg_backend_pid()")[0][0])
        postmaster = int(Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
        load_before = os.getloadavg()[0]
        with postgres.PeakMemory(postmaster) as memory:
            baseline = memory.sample()
            started = time.perf_counter()
            build()
            seconds = time.perf_counter() - started
        execute("RESET maintenance_work_mem")
        return {
            "build_s": round(seconds, 1),
            "peak_mem_mb": round(memory.peak_bytes / 2**20),
            "mem_before_mb": round(baseline / 2**20),
            "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }

    try:
        passages, queries = datasets.scifact_passages_and_queries()
        embedder = get_embedder()
        real, _, from_cache = datasets.embedded_passages(embedder, passages, cache=True)
        result["real_vectors"] = {"model": embedder.model_name, "count": len(real), "from_cache": from_cache}
        contents = [p[:1000] for p in passages]
        recall_vectors = np.asarray(embedder.embed_documents(queries[-args.recall_queries :]), dtype=np.float32)
        http_queries = queries[: args.warmup + args.requests]

        rng = np.random.default_rng(args.seed)
        if args.reuse:
            tenant = Tenant.objects.get(pk=args.reuse, name__startswith="bench-scale")
            tier = tenant.rate_tier
            kb = tenant.knowledge_bases.get(name="scale-bench")
        else:
            tenant = create_tenant(results.unique_name("bench-scale"))
            tier = throwaway.unlimited_rate_tier(tenant)
            kb = create_knowledge_base(tenant=tenant, name="scale-bench")
        version = kb.active_version
        scope = SearchScope(tenant_id=tenant.pk, version_ids=(version.pk,), embedding_dim=DIM)
        compiled = {name: compile_filters(spec) for name, spec in FILTERS.items()}
        no_filter = compile_filters(None)
        key = create_api_key(tenant=tenant, name="bench").raw_key

        def probe_and_serve(entry: dict) -> None:
            """The exact-vs-HNSW comparison, the filtered BM25 leg's parts, then HTTP."""
            if args.threshold_queries:
                entry["exact_or_hnsw"] = measure.exact_or_hnsw(
                    scope, compiled, recall_vectors, args.threshold_queries, args.max_exact_rows
                )
                print(f"  exact or HNSW: {entry['exact_or_hnsw']}", flush=True)
            if args.vector_only:
                return
            entry["keyword_filter_p50_ms"] = measure.keyword_filter_cost(
                tenant,
                version,
                FILTERS,
                compiled,
                http_queries[: args.threshold_queries or 30],
                settings.LEXICAL_FILTER_MAX_IDS,
            )
            print(f"  keyword filter p50 ms: {entry['keyword_filter_p50_ms']}", flush=True)
            entry["http"] = http_search(args, key, http_queries, workdir)
            print(
                "  HTTP p50 (p95) ms: "
                + ", ".join(f"{n} {v['p50_ms']} ({v['p95_ms']}) short {v['short']}" for n, v in entry["http"].items()),
                flush=True,
            )

        if args.reuse:
            size = Chunk.objects.filter(tenant=tenant).count()
            print(f"== reusing tenant {tenant.pk}: {size:,} rows (load {os.getloadavg()[0]:.1f})", flush=True)
            entry = {"reused": True, "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
            probe_and_serve(entry)
            entry["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            result["sizes"][str(size)] = entry
            results.write_result("scale", result)
            sizes = []
        all_vectors = np.empty((max(sizes, default=0), DIM), dtype=np.float32)  # row g's vector
        loaded = 0

        for size in sizes:
            entry: dict = {"loadavg_at_start": [round(x, 2) for x in os.getloadavg()]}
            print(f"== {size:,} rows (load {os.getloadavg()[0]:.1f})", flush=True)
            drop_hnsw_indexes()
            started = time.perf_counter()
            for first in range(loaded, size, SLICE_ROWS):
                rows = min(SLICE_ROWS, size - first)
                vectors, main_component = synthetic.synthesize(real, rows, rng)
                synthetic.load_synthetic_documents(
                    kb,
                    contents,
                    vectors,
                    main_component,
                    rows // CHUNKS_PER_DOC,
                    first_row=first,
                    metadata=business_fields,
                )
                all_vectors[first : first + rows] = vectors
            loaded = size
            entry["copy_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            execute("ANALYZE knowledge_chunk")
            for gin in ("chunk_metadata_gin", "chunk_tags_gin"):
                execute("SELECT gin_clean_pending_list(%s::regclass)", [gin])
            entry["analyze_and_gin_merge_s"] = round(time.perf_counter() - started, 1)
            if not args.vector_only:
                started = time.perf_counter()
                synthetic.build_keyword_index(version)
                entry["lexical_rebuild_s"] = round(time.perf_counter() - started, 1)
            entry["table_total_mb"] = round(execute("SELECT pg_total_relation_size('knowledge_chunk')")[0][0] / 2**20)
            print(
                f"  COPY {entry['copy_s']} s, lexical index {entry.get('lexical_rebuild_s')} s, "
                f"table {entry['table_total_mb']} MB",
                flush=True,
            )

            # row g of all_vectors <-> the g-th chunk id of the tenant (one COPY per slice, in row order)
            ids = np.array(
                [r[0] for r in execute("SELECT id FROM knowledge_chunk WHERE tenant_id = %s ORDER BY id", [tenant.pk])]
            )
            for g in rng.integers(0, size, 5):
                content = execute("SELECT content FROM knowledge_chunk WHERE id = %s", [int(ids[g])])[0][0]
                if not content.endswith(f"[synthetic chunk {g}]"):
                    raise RuntimeError(f"row {g} is not chunk id {ids[g]}: ids are not in COPY order")
            truth = {
                name: synthetic.exact_top_k(all_vectors[:size], recall_vectors, args.top_k, filter_mask(name, size))
                for name in (None, *FILTERS)
            }
            register_vector_type()
            # the numpy truth against PostgreSQL's own exact scan, for a few queries
            for q in range(3):
                with connection.cursor() as cursor:
                    cursor.execute("SET enable_indexscan = off")
                    cursor.execute(
                        f"SELECT id FROM knowledge_chunk WHERE tenant_id = %s AND embedding_dim = {DIM} "
                        f"ORDER BY (embedding::vector({DIM})) <=> %s LIMIT %s",
                        [tenant.pk, recall_vectors[q], args.top_k],
                    )
                    sql_ids = {row[0] for row in cursor.fetchall()}
                    cursor.execute("RESET enable_indexscan")
                overlap = len(sql_ids & set(ids[truth[None][q]].tolist()))
                if overlap < args.top_k - 1:  # float ties may swap the 10th
                    raise RuntimeError(f"numpy and SQL exact top-{args.top_k} disagree ({overlap} shared)")

            entry["variants"] = {}
            for variant in (v for v in grid if args.grid_from <= size <= v.largest_size):
                drop_hnsw_indexes()
                build = timed_build(lambda: execute(variant.ddl()))
                index_bytes = execute("SELECT pg_relation_size(%s::regclass)", [variant.name])[0][0]
                build["index_mb"] = round(index_bytes / 2**20)

                def variant_search(qv, name, variant=variant):
                    sql_filter = compiled[name].sql if name else no_filter.sql
                    extra = f" AND ({sql_filter.sql})" if sql_filter else ""
                    with transaction.atomic(), connection.cursor() as cursor:
                        # steered to the graph walk as the engine steers its own (no sort)
                        cursor.execute(
                            "SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true)",
                            [str(fixed_ef_search or ef_search_for(size, depth))],
                        )
                        cursor.execute(
                            f"SELECT id, (embedding::{variant.storage}({DIM})) <=> "
                            f"(%s::vector({DIM}))::{variant.storage}({DIM}) AS distance FROM knowledge_chunk "
                            f"WHERE tenant_id = %s AND kb_version_id = %s AND embedding_dim = {DIM}{extra} "
                            "ORDER BY distance LIMIT %s",
                            [qv, tenant.pk, version.pk, *(sql_filter.params if sql_filter else []), depth],
                        )
                        rows = cursor.fetchall()
                    return [chunk_id for chunk_id, _ in sorted(rows, key=lambda row: row[1])]

                build["search"] = measure.recall_and_latency(variant_search, truth, ids, recall_vectors, args.top_k)
                entry["variants"][variant.label] = build
                print(
                    f"  {variant.label}: build {build['build_s']} s, peak {build['peak_mem_mb']} MB, "
                    f"index {build['index_mb']} MB, recall@10 "
                    + ", ".join(f"{k} {v['recall_at_10']:.3f} ({v['p50_ms']} ms)" for k, v in build["search"].items()),
                    flush=True,
                )
                execute(f"DROP INDEX {variant.name}")

            # the service's own index and search path
            drop_hnsw_indexes()
            build = timed_build(lambda: vector_index().ensure_index(DIM))
            build["index_mb"] = round(execute("SELECT pg_relation_size(%s::regclass)", [service_index])[0][0] / 2**20)
            build["indexdef"] = execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [service_index])[0][0]
            execute("ANALYZE knowledge_chunk")
            engine = vector_index()
            build["search"] = measure.recall_and_latency(
                lambda qv, name: [
                    hit.chunk_id
                    for hit in engine.search(scope, qv, depth, compiled[name].sql if name else no_filter.sql)
                ],
                truth,
                ids,
                recall_vectors,
                args.top_k,
            )
            entry["service_index"] = build
            print(
                f"  service index ({build['indexdef'].split(' USING ')[1]}): build {build['build_s']} s, "
                f"peak {build['peak_mem_mb']} MB, index {build['index_mb']} MB, recall@10 "
                + ", ".join(f"{k} {v['recall_at_10']:.3f} ({v['p50_ms']} ms)" for k, v in build["search"].items()),
                flush=True,
            )

            probe_and_serve(entry)
            entry["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            result["sizes"][str(size)] = entry
            results.write_result("scale", result)
        return 0
    finally:
        if args.keep and tenant is not None:
            print(f"kept tenant {tenant.pk}: --reuse {tenant.pk} measures it again and then removes it")
            tenant = None
        if tenant is not None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'bench_scale_%%' OR indexname = %s",
                    [hnsw_index_name(DIM)],
                )
                for (name,) in cursor.fetchall():
                    cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
                started = time.perf_counter()
                cursor.execute("DELETE FROM knowledge_chunk WHERE tenant_id = %s", [tenant.pk])
                result["chunks_delete_s"] = round(time.perf_counter() - started, 1)

            def restore() -> dict:
                from knowledge.stores import vector_index

                with connection.cursor() as cursor:
                    cursor.execute("VACUUM ANALYZE knowledge_chunk")
                vector_index().ensure_index(DIM)
                return {"service_index_restored": True}

            throwaway.clean_up(result, tenant, tier, tenant_prefix="bench-scale", then=restore)
        result["total_s"] = round(time.perf_counter() - started_all, 1)
        if result["sizes"]:
            print(f"wrote {results.write_result('scale', result)} (total {result['total_s']} s)")
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
