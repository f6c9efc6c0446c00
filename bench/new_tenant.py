"""A new tenant's searches before the chunk table's statistics know it, against the same searches after
an ANALYZE (docs/benchmarks/decisions.md, "A tenant's rows by id").

    .venv/bin/python bench/new_tenant.py --dataset ../shared/datasets/drcd --queries 200

A fresh tenant gets one KB with the dataset's corpus, ingested in process (the shared table holds what
the database held already: the statistics learn of the tenant only at the table's next ANALYZE, which
autovacuum runs after a tenth of the table changed). Then the dataset's queries in ``--mode`` (the
result cache off) before and after ``ANALYZE`` of the chunk table, each time after one untimed pass,
with the plan of the hits' read (``tenant_id = %s AND id = ANY(%s)``). Before the ANALYZE they run
also on the control: the chunk table indexed by the tenant alone, as before ``knowledge 0025`` (its
index of (tenant, id) dropped meanwhile and built again after). The tenant is removed afterwards.
Goal: the p50 before the ANALYZE within 1.2x of the p50 after it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import _common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=_common.DATASETS_DIR / "drcd")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--mode", default="hybrid")
    args = parser.parse_args()
    _common.setup_django()
    from django.db import connection

    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base, delete_tenant
    from retrieval.evaluation.datasets import corpus_files, load_dataset
    from tenants.services import create_tenant

    dataset = load_dataset(args.dataset, args.split)
    queries = list(dataset.queries.values())[: args.queries]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_chunk")
        print("load average:", os.getloadavg(), "rows in the chunk table:", cursor.fetchone()[0])
    tenant = create_tenant(_common.unique_name("bench-new-tenant"))
    try:
        kb = create_knowledge_base(tenant=tenant, name=dataset.name)
        started = time.perf_counter()
        report = Ingester(kb).ingest(corpus_files(dataset))
        print(f"ingested {report.added} documents, {report.chunks} chunks in {time.perf_counter() - started:.1f} s")
        before = measure(tenant, kb, queries, args.mode, "before ANALYZE")
        with tenant_index_alone():
            measure(tenant, kb, queries, args.mode, "before ANALYZE, the control (the tenant index alone)")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE knowledge_chunk")
        after = measure(tenant, kb, queries, args.mode, "after ANALYZE")
        print(f"before / after ANALYZE, p50: {before / after:.2f}x (goal <= 1.2x)")
    finally:
        delete_tenant(tenant)
        connection.close()
    print("load average:", os.getloadavg())


@contextmanager
def tenant_index_alone() -> Iterator[None]:
    """The chunk table's tenant index as it was before ``knowledge 0025``, meanwhile."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX chunk_tenant_id")
        cursor.execute("CREATE INDEX bench_chunk_tenant_only ON knowledge_chunk (tenant_id)")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("CREATE INDEX chunk_tenant_id ON knowledge_chunk (tenant_id, id)")
            cursor.execute("DROP INDEX bench_chunk_tenant_only")


def measure(tenant, kb, queries: list[str], mode: str, label: str) -> float:
    """p50 in ms of the queries in ``mode`` (after one untimed pass), and the plan of a hits' read."""
    from django.db import connection

    from knowledge.models import Chunk
    from retrieval.services.search import search
    from retrieval.types import SearchRequest

    def run(query: str) -> None:
        search(tenant, SearchRequest(query=query, mode=mode, kb_ids=[kb.pk]))

    for query in queries:
        run(query)
    seconds = []
    for query in queries:
        started = time.perf_counter()
        run(query)
        seconds.append(time.perf_counter() - started)
    summary = _common.summarize_ms(seconds)
    ids = list(Chunk.objects.filter(tenant=tenant).values_list("id", flat=True)[:100])
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id, content_hash FROM knowledge_chunk "
            "WHERE tenant_id = %s AND id = ANY(%s)",
            [tenant.pk, ids],
        )
        plan = cursor.fetchone()[0][0]["Plan"]
    print(f"{label}: {mode} p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms over {len(seconds)} queries; "
          f"the hits' read: {plan['Node Type']} on {plan.get('Index Name')}, "
          f"{plan.get('Rows Removed by Filter', 0)} rows read beyond the ids")  # fmt: skip
    return float(summary["p50_ms"])


if __name__ == "__main__":
    main()
