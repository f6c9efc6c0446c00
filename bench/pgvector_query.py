"""The pgvector query of a vector search at 100k chunks, in-process: where its time goes, what
``hnsw.ef_search`` buys, and what one round trip instead of four saves.

    .venv/bin/python bench/hybrid_ab.py --in-tree "$PWD" --step prepare --chunks 100000 > /tmp/state.json
    .venv/bin/python bench/pgvector_query.py --state /tmp/state.json
    .venv/bin/python bench/hybrid_ab.py --in-tree "$PWD" --step cleanup --state "$(cat /tmp/state.json)"

On the bench tenant's rows (hybrid_ab.py's prepare step: SciFact vectors mixed into synthetic rows),
with real SciFact query vectors and the service's depth (SEARCH_CANDIDATES):
  - EXPLAIN (ANALYZE, BUFFERS) of the nearest-neighbour statement ``PgVectorIndex.search`` sends
    (captured from a real search), at the service's ef_search, after the timed runs (warm);
  - interleaved query by query: ``PgVectorIndex.search`` (planner settings and query in one round
    trip), the same statement sent as before this branch (BEGIN, settings, query, COMMIT: four round
    trips), the statement alone, and an empty round trip (``SELECT 1``);
  - per ef_search: p50 / p95 of the statement and its recall@10 / recall@100 against an exact scan
    of the same scope (the first ``--exact`` queries);
  - the server's ``shared_buffers`` and ``effective_cache_size``, the sizes of the HNSW index, the
    table and its TOAST, and per statement (the first ``--buffers`` queries, at the service's
    ef_search, after the timed runs) the pages found in PostgreSQL's buffer cache vs read from the OS
    and the server's execution time (EXPLAIN ANALYZE: no round trip, so less noisy under load);
  - with ``--prewarm``: first ``pg_prewarm`` of the HNSW index, the table and its TOAST (timed; it
    creates the ``pg_prewarm`` extension in the database if missing).
A server setting such as ``shared_buffers`` applies at the embedded server's start, so compare two
runs with the server restarted between them (``manage.py embedded_services stop``; the next connection
starts it with ``EMBEDDED_PG_SHARED_BUFFERS_MB``).
Writes bench/results/pgvector_query-<date>.json and prints tables.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import _common


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", required=True, help="the JSON hybrid_ab.py's prepare step printed")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--exact", type=int, default=100, help="queries whose recall is measured")
    parser.add_argument("--ef", default="100,125,150,200", help="ef_search values swept")
    parser.add_argument("--buffers", type=int, default=50, help="queries whose buffer use is counted")
    parser.add_argument("--prewarm", action="store_true", help="pg_prewarm the index and the table first")
    args = parser.parse_args()
    _common.setup_django()
    import numpy as np
    from django.conf import settings
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from engines.base import SearchScope
    from engines.embedders import get_embedder
    from knowledge.models import KnowledgeBase
    from knowledge.stores import vector_index
    from retrieval.filters import compile_filters

    state = json.loads(Path(args.state).read_text().strip().splitlines()[-1])
    version = KnowledgeBase.objects.get(tenant_id=state["tenant"]).active_version
    scope = SearchScope(state["tenant"], (version.pk,), version.embedding_dim)
    index, no_filter, depth = vector_index(), compile_filters(None).sql, settings.SEARCH_CANDIDATES
    _, queries = _common.scifact_passages_and_queries()
    vectors = get_embedder(version.embedding_model).embed_documents(queries[-args.queries :])
    result: dict = {"machine": _common.machine_info(), "loadavg_at_start": os.getloadavg(), "depth": depth,
                    "rows_in_scope": index.plan(scope, no_filter), "server": server_memory(connection)}
    if args.prewarm:
        result["prewarm"] = prewarm(connection)

    def statement_of(vector) -> str:
        """The nearest-neighbour statement a search sends for this vector (parameters bound)."""
        with CaptureQueriesContext(connection) as captured:
            index.search(scope, vector, depth, no_filter, plan=result["rows_in_scope"])
        sql = [query["sql"] for query in captured.captured_queries if "<=>" in query["sql"]][-1]
        return next(part for part in sql.split("; ") if "<=>" in part)

    def run(statement: str, *, ef_search: int, exact: bool = False, explain: bool = False) -> list:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT set_config('enable_indexscan', %s, true), set_config('hnsw.ef_search', %s, true)",
                           ["off" if exact else "on", str(ef_search)])
            cursor.execute(("EXPLAIN (ANALYZE, BUFFERS) " if explain else "") + statement)
            return cursor.fetchall()

    statements = [statement_of(vector) for vector in vectors]
    service_ef = max(index.ef_search, 2 * depth)

    def one_round_trip(i):
        index.search(scope, vectors[i], depth, no_filter, plan=result["rows_in_scope"])

    def four_round_trips(i):
        run(statements[i], ef_search=service_ef)

    def statement_alone(i):
        with connection.cursor() as cursor:
            cursor.execute(statements[i])
            cursor.fetchall()

    def empty_round_trip(i):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchall()

    variants = {"PgVectorIndex.search (1 round trip)": one_round_trip, "before: 4 round trips": four_round_trips,
                "the statement alone": statement_alone, "SELECT 1": empty_round_trip}
    sweep = [int(ef) for ef in args.ef.split(",")]
    for ef in sweep:
        variants[f"ef_search {ef}"] = lambda i, ef=ef: run(statements[i], ef_search=ef)
    names = list(variants)
    for i in range(min(5, len(statements))):  # warm-up
        for name in names:
            variants[name](i)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for i in range(len(statements)):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            started = time.perf_counter()
            variants[name](i)
            seconds[name].append(time.perf_counter() - started)
    result["latency"] = {name: _common.summarize_ms(values) for name, values in seconds.items()}

    plan = run(statements[0], ef_search=service_ef, explain=True)
    result["explain"] = "\n".join(row[0] for row in plan if "Order By" not in row[0])  # not the 384 numbers
    pages = [buffers(run(statement, ef_search=service_ef, explain=True)) for statement in statements[: args.buffers]]
    result["pages_per_statement"] = {kind: round(float(np.mean([page[kind] for page in pages])), 1)
                                     for kind in ("hit", "read")}
    result["pages_per_statement"]["execution_p50_ms"] = round(float(np.median([page["ms"] for page in pages])), 2)

    def ids(statement: str, **how) -> list[int]:
        return [row[0] for row in run(statement, **how)]

    exact = [ids(statement, ef_search=service_ef, exact=True) for statement in statements[: args.exact]]
    recall = {}
    for ef in sweep:
        found = [ids(statement, ef_search=ef) for statement in statements[: args.exact]]
        recall[ef] = {f"recall@{k}": round(float(np.mean([len(set(f[:k]) & set(e[:k])) / k
                                                          for f, e in zip(found, exact)])), 3) for k in (10, depth)}
        recall[ef]["short_lists"] = sum(len(f) < depth for f in found)
    result["recall"] = recall
    result["loadavg_at_end"] = os.getloadavg()

    print(f"{result['rows_in_scope']} rows in scope (counted up to the exact-scan threshold), depth {depth}, "
          f"service ef_search {service_ef}\nserver: {result['server']}\nprewarm: {result.get('prewarm')}\n"
          f"pages per statement (mean of {len(pages)}, after the timed runs): {result['pages_per_statement']}"
          f"\n\nEXPLAIN (ANALYZE, BUFFERS), warm:\n{result['explain']}")
    rows = []
    for name in names:
        latency = result["latency"][name]
        ef = int(name.split()[-1]) if name.startswith("ef_search") else None
        rows.append([name, latency["p50_ms"], latency["p95_ms"],
                     *((recall[ef]["recall@10"], recall[ef][f"recall@{depth}"]) if ef else ("", ""))])
    _common.print_table(["variant", "p50 ms", "p95 ms", "recall@10", f"recall@{depth}"], rows,
                        title=(f"{len(statements)} SciFact queries, interleaved; load "
                               f"{result['loadavg_at_start'][0]:.2f} -> {result['loadavg_at_end'][0]:.2f}"))
    print(f"\nwrote {_common.write_result('pgvector_query', result)}")
    return 0


def server_memory(connection) -> dict:
    """The server's cache settings and the sizes (MB) of what a vector search reads (index: None if absent)."""
    from engines.pgvector_index import hnsw_index_name

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('shared_buffers'), current_setting('effective_cache_size'), "
                       "pg_relation_size(to_regclass(%s)) / 1048576, pg_relation_size('knowledge_chunk') / 1048576, "
                       "pg_relation_size(reltoastrelid) / 1048576 FROM pg_class WHERE relname = 'knowledge_chunk'",
                       [hnsw_index_name(384)])
        names = ("shared_buffers", "effective_cache_size", "hnsw_index_mb", "table_mb", "toast_mb")
        return dict(zip(names, cursor.fetchone()))


def prewarm(connection) -> dict:
    """pg_prewarm (buffer mode) of the HNSW index, the table and its TOAST: pages loaded and seconds."""
    from engines.pgvector_index import hnsw_index_name

    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        started = time.perf_counter()
        cursor.execute("SELECT pg_prewarm(%s::regclass), pg_prewarm('knowledge_chunk'), pg_prewarm(reltoastrelid) "
                       "FROM pg_class WHERE relname = 'knowledge_chunk'", [hnsw_index_name(384)])
        index_pages, table_pages, toast_pages = cursor.fetchone()
    return {"index_pages": index_pages, "table_pages": table_pages, "toast_pages": toast_pages,
            "seconds": round(time.perf_counter() - started, 2)}


def buffers(plan_rows: list) -> dict:
    """Shared buffers hit and read by the whole statement (the plan's top ``Buffers:`` line) and its
    execution time on the server (``ms``: no round trip in it)."""
    counts = {"hit": 0, "read": 0}
    lines = [row[0].strip() for row in plan_rows]
    for part in next((line for line in lines if line.startswith("Buffers: shared")), "").split()[2:]:
        kind, _, value = part.partition("=")
        if kind in counts:
            counts[kind] = int(value)
    counts["ms"] = float(next(line for line in lines if line.startswith("Execution Time:")).split()[2])
    return counts


if __name__ == "__main__":
    sys.exit(main())
