"""Tenant partitions of the chunk table: ``--rows`` synthetic chunks (bench/synthetic.py) across
``--tenants`` tenants, the first holding ``--large-share`` of them, searched on today's single table and
again after ``manage.py partition_chunks`` (the largest tenant, or with ``--own all`` every tenant, in a
partition of its own) and ``rebuild_vector_index``.

Per tenant, on both: recall@10 of the service's vector search (to its depth, ``SEARCH_CANDIDATES``)
against exact and its p50 / p95 (engine calls, no HTTP), and the time to build an HNSW graph over the rows a search walks (the whole table, or
the tenant's partition: a scratch index, dropped again). Also the conversion's lock time and each
``--own`` step's time. Costs: the load (minutes at 1M), two builds of every graph, the searches.
The tenants are deleted and the table merged back (``partition_chunks --merge``) at the end, unless
``--keep`` (it starts from a plain table, so every own partition is one of its tenants'). Writes
bench/results/partitions-<date>.json."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from bench import synthetic
from bench.harness import datasets, project, results
from bench.partitions import measure
from bench.synthetic import DIM, SLICE_ROWS

CHUNKS_PER_DOC = 100


def tenant_rows(rows: int, tenants: int, large_share: float) -> list[int]:
    """Rows per tenant: the first ``large_share`` of them, the others an equal part of the rest, each a
    multiple of CHUNKS_PER_DOC."""
    large = int(rows * large_share) // CHUNKS_PER_DOC * CHUNKS_PER_DOC
    small = (rows - large) // (tenants - 1) // CHUNKS_PER_DOC * CHUNKS_PER_DOC
    return [large] + [small] * (tenants - 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="chunks across all the tenants")
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--large-share", type=float, default=0.5, help="the largest tenant's share of the rows")
    parser.add_argument(
        "--own", choices=["largest", "all"], default="largest", help="tenants given their own partition"
    )
    parser.add_argument("--queries", type=int, default=100, help="queries per tenant (SciFact's, embedded)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--maintenance-work-mem", default="4GB", help="for every HNSW build (the session's)")
    parser.add_argument("--keep", action="store_true", help="leave the tenants and the partitioned table")
    args = parser.parse_args()
    if args.tenants < 2:
        raise SystemExit("--tenants must be 2 or more")

    project.setup_django()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from engines import chunk_partitions, pgvector_index
    from engines.base import SearchScope
    from engines.embedders import get_embedder
    from engines.pgvector_index import PgVectorIndex, hnsw_index_name
    from knowledge.knowledge_bases import create_knowledge_base, delete_tenant
    from knowledge.models import Chunk
    from tenants.services import create_tenant

    table = Chunk._meta.db_table
    depth = settings.SEARCH_CANDIDATES
    if chunk_partitions.is_partitioned(table):
        raise SystemExit(f"{table} is partitioned already: run partition_chunks --merge first")

    def execute(statement: str, params=None):
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else None

    # the builds as docs/operations.md sizes them: the graph in memory, both cores (pgvector's build slows
    # many times over once the graph overflows maintenance_work_mem, the server's 64MB by default)
    execute("SELECT set_config('maintenance_work_mem', %s, false)", [args.maintenance_work_mem])
    execute("SET max_parallel_maintenance_workers = 2")

    passages, queries = datasets.scifact_passages_and_queries()
    embedder = get_embedder()
    real, _, _ = datasets.embedded_passages(embedder, passages, cache=True)
    contents = [p[:1000] for p in passages]
    query_vectors = np.asarray(embedder.embed_documents(queries[: args.queries]), dtype=np.float32)
    rng = np.random.default_rng(args.seed)
    sizes = tenant_rows(args.rows, args.tenants, args.large_share)
    result: dict = {
        "config": vars(args),
        "machine": results.machine_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "code": results.code_fingerprint(["engines/pgvector_index.py", "engines/chunk_partitions.py"]),
        "tenant_rows": sizes,
    }
    tenants, scopes, truth = [], {}, {}
    try:
        started = time.perf_counter()
        kbs = []
        for number in range(len(sizes)):  # every KB first: a new KB version makes sure its index exists
            tenant = create_tenant(results.unique_name(f"bench-partitions-{number}"))
            kbs.append(create_knowledge_base(tenant=tenant, name="partitions-bench"))
            tenants.append(tenant)
        # the rows are loaded with no HNSW index (inserting them into the graph one by one is far slower);
        # the single table's index is built once over all of them below
        execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIM)}")
        for tenant, kb, size in zip(tenants, kbs, sizes, strict=True):
            vectors = np.empty((size, DIM), dtype=np.float32)
            for first in range(0, size, SLICE_ROWS):
                rows = min(SLICE_ROWS, size - first)
                vectors[first : first + rows], main = synthetic.synthesize(real, rows, rng)
                synthetic.load_synthetic_documents(
                    kb, contents, vectors[first : first + rows], main, rows // CHUNKS_PER_DOC, first_row=first
                )
            # row g <-> the tenant's g-th chunk id (one COPY per slice, in row order)
            ids = np.array(
                [r[0] for r in execute(f"SELECT id FROM {table} WHERE tenant_id = %s ORDER BY id", [tenant.pk])]
            )
            mask = np.ones(size, dtype=bool)
            truth[tenant.pk] = [ids[rows] for rows in synthetic.exact_top_k(vectors, query_vectors, args.top_k, mask)]
            scopes[tenant.pk] = SearchScope(tenant.pk, (kb.active_version_id,), DIM)
            print(f"tenant {tenant.pk}: {size:,} rows", flush=True)
        result["load_s"] = round(time.perf_counter() - started, 1)

        engine = PgVectorIndex(table)
        build = engine.build_parameters(DIM)
        execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIM)}")
        started = time.perf_counter()
        engine.ensure_index(DIM)
        execute(f"ANALYZE {table}")
        single: dict = {"index_build_s": round(time.perf_counter() - started, 1), "build": list(build)}
        single["tenants"] = measure.search_tenants(
            PgVectorIndex(table), scopes, truth, query_vectors, args.top_k, depth
        )
        result["single_table"] = single
        print(f"single table: {single}", flush=True)

        partitioned: dict = {"lock_s": round(chunk_partitions.convert(table), 3), "own_s": {}}
        for tenant in tenants if args.own == "all" else tenants[:1]:
            moved, seconds = chunk_partitions.own(table, tenant.pk)
            partitioned["own_s"][tenant.pk] = {"rows": moved, "seconds": round(seconds, 1)}
        call_command("rebuild_vector_index", "--dimension", str(DIM))
        # the moved rows' dead copies out of the DEFAULT partition's graph and counts, so ef_search is
        # sized from each partition's rows now (and not from the single table's, remembered for a minute)
        execute(f"VACUUM ANALYZE {table}")
        pgvector_index._rows_in_index.cache_clear()
        partitioned["graph_build_s"] = {
            p.name: measure.build_seconds(p.name, DIM, *build) for p in chunk_partitions.partitions(table)
        }
        partitioned["tenants"] = measure.search_tenants(
            PgVectorIndex(table), scopes, truth, query_vectors, args.top_k, depth
        )
        result["partitioned"] = partitioned
        print(f"partitioned: {partitioned}", flush=True)
    finally:
        if not args.keep:
            # the tenants' own partitions dropped and their rows deleted before the merge (which then
            # copies none), and the deleted rows out of the graph as partition_chunks --own does it
            for partition in chunk_partitions.partitions(table):
                for tenant_id in partition.tenant_ids:
                    execute(f"DROP TABLE {chunk_partitions.detach(table, tenant_id)}")
            for tenant in tenants:
                delete_tenant(tenant)
            if chunk_partitions.is_partitioned(table):
                call_command("partition_chunks", "--merge")
            chunk_partitions.rebuild_graphs(table)
        result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        print(f"wrote {results.write_result('partitions', result)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
