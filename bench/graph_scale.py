"""The graph leg and Leiden communities at scale: a synthetic graph over N chunks (default 100k) in the
PostgreSQL graph tables, then the graph leg's latency (``rank_by_graph``, in-process, hops 1 and 2) and
the time to read the version's edges and find its communities.

    .venv/bin/python bench/graph_scale.py [--chunks 100000] [--queries 200]

Chunks are rows with a 3-dimension placeholder vector (no HNSW index covers them) in one KB version of
a fresh tenant (removed afterwards). Each chunk mentions ``ENTITIES_PER_CHUNK`` entities drawn from a
Zipf-like vocabulary of codes (``ent-00042``: the extractor finds them in a query as it would product
codes), each related to the next (co-occurrence within a window), so hubs and rare entities both exist.
Results go to docs/BENCHMARKS.md by hand.
"""
from __future__ import annotations

import argparse
import os
import random
import time

import _common

ENTITIES_PER_CHUNK = 5
VOCABULARY_PER_CHUNK = 0.3  # vocabulary size = 0.3 x chunks
BATCH = 5_000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    _common.setup_django()
    from django.db import connection, transaction

    from engines.base import Entity, Extraction, Relation
    from engines.graph_communities import detect_communities
    from knowledge.models import Chunk, Document
    from knowledge.services import create_knowledge_base, delete_tenant
    from knowledge.stores import graph_store
    from retrieval.services.graph import rank_by_graph
    from tenants.services import create_tenant

    print("load average:", os.getloadavg())
    rng = random.Random(12)
    vocabulary = max(int(args.chunks * VOCABULARY_PER_CHUNK), 100)
    weights = [1 / (rank + 1) for rank in range(vocabulary)]  # Zipf, s = 1
    tenant = create_tenant(_common.unique_name("bench-graph-scale"))
    try:
        kb = create_knowledge_base(tenant=tenant, name="scale")
        version = kb.active_version
        document = Document.objects.create(knowledge_base=kb, tenant=tenant, source_uri="synthetic", title="synthetic")
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                INSERT INTO {Chunk._meta.db_table} (document_id, kb_version_id, tenant_id, knowledge_base_id, ordinal,
                    content, content_hash, token_count, embedding_dim, embedding, doc_type, created_at, tags, metadata)
                SELECT %s, %s, %s, %s, n, 'synthetic passage ' || n, md5(n::text), 10, 3, '[0,0,1]', 'txt', now(),
                    '{{}}', '{{}}'
                FROM generate_series(0, %s - 1) AS n
                """,
                [document.pk, version.pk, tenant.pk, kb.pk, args.chunks],
            )
        chunk_ids = list(Chunk.objects.filter(kb_version=version).order_by("id").values_list("id", flat=True))
        store = graph_store()
        for start in range(0, len(chunk_ids), BATCH):
            graphs = {}
            for chunk_id in chunk_ids[start : start + BATCH]:
                names = list(dict.fromkeys(f"ent-{i:05d}" for i in rng.choices(range(vocabulary), weights, k=ENTITIES_PER_CHUNK)))
                entities = tuple(Entity(name, name.upper(), "code", 1) for name in names)
                relations = tuple(Relation(*sorted((a, b)), 0.5) for a, b in zip(names, names[1:]))
                graphs[chunk_id] = Extraction(entities, relations)
            with transaction.atomic():
                store.replace_chunks(tenant.pk, version.pk, [], graphs)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"built {len(chunk_ids)} chunks, vocabulary {vocabulary}, in {time.perf_counter() - started:.1f} s")

        started = time.perf_counter()
        edges = store.edges(tenant.pk, version.pk)
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        partitions = detect_communities(edges, levels=2, split_size=30, min_size=3)
        leiden_s = time.perf_counter() - started
        levels = {level: sum(1 for p in partitions if p.level == level) for level in (0, 1)}
        print(f"edges: {len(edges)} read in {read_s:.2f} s; Leiden {leiden_s:.2f} s -> communities per level {levels}")

        queries = [
            " ".join(f"ent-{rng.choice(range(vocabulary)):05d}" for _ in range(rng.choice((1, 2))))
            for _ in range(args.queries)
        ]
        for hops in (1, 2, 1, 2):  # interleaved: the machine's load drifts
            seconds, hits = [], []
            for query in queries:
                started = time.perf_counter()
                ranking = rank_by_graph(tenant.pk, (version.pk,), query, hops=hops)
                seconds.append(time.perf_counter() - started)
                hits.append(len(ranking.hits))
            summary = _common.summarize_ms(seconds)
            print(f"graph leg, hops {hops}, {len(queries)} queries: p50 {summary['p50_ms']} ms, "
                  f"p95 {summary['p95_ms']} ms; median hits {sorted(hits)[len(hits) // 2]}")  # fmt: skip
    finally:
        delete_tenant(tenant)
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
