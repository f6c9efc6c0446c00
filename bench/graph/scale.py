"""The graph leg and Leiden communities at scale: a synthetic graph over N chunks (default 100k) in the
PostgreSQL graph tables, then the graph leg's latency (``rank_by_graph``, in-process, hops 1 and 2, and hops 2 with the bridge read) and
the time to read the version's edges and find its communities.

    .venv/bin/python -m bench.graph.scale [--chunks 100000] [--queries 100]

Chunks are rows with a 3-dimension placeholder vector (no HNSW index covers them) in one KB version of
a fresh tenant (removed afterwards). Each chunk mentions ``ENTITIES_PER_CHUNK`` draws from a vocabulary
of codes (``ent-00042``: the extractor finds them in a query as it would product codes) with density
1 / rank (Zipf-like, s = 1), each related to the next draw, so hubs and rare entities both exist. The
graph is written by SQL statements over ``generate_series`` (seconds, not the ingestion path's
``GraphStore.write``: this measures reads).

Before / after on one build: ``--keep`` builds and keeps the tenant (its id is printed), ``--tenant
ID`` measures a kept build, ``--code DIR`` imports the project from another checkout (e.g. an older
commit's ``git archive``; give it this checkout's state with ``VAR_DIR=$PWD/var``), ``--delete``
removes the kept tenant after measuring. Current figures: docs/BENCHMARKS.md,
"Graph retrieval".
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from bench.harness import project, results, stats

ENTITIES_PER_CHUNK = 5
VOCABULARY_PER_CHUNK = 0.3  # vocabulary size = 0.3 x chunks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of hops 1 and 2")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic tenant (print its id)")
    parser.add_argument("--tenant", type=int, default=None, help="measure this kept tenant's graph (no build)")
    parser.add_argument("--delete", action="store_true", help="with --tenant: remove it after measuring")
    parser.add_argument("--code", type=Path, default=None, help="import the project from this checkout")
    args = parser.parse_args()
    code = project.setup_django(args.code)
    from django.db import connection

    from knowledge.knowledge_bases import delete_tenant
    from tenants.models import Tenant

    print("load average:", os.getloadavg(), "code:", code)
    vocabulary = max(int(args.chunks * VOCABULARY_PER_CHUNK), 100)
    if args.tenant is None:
        tenant = build(args.chunks, vocabulary)
        communities(tenant)
    else:
        tenant = Tenant.objects.get(pk=args.tenant)
    try:
        measure(tenant, vocabulary, args.queries, args.rounds)
    finally:
        if args.tenant is None and not args.keep or args.delete:
            delete_tenant(tenant)
        elif args.keep:
            print(f"kept: --tenant {tenant.pk}")
        connection.close()
    print("load average:", os.getloadavg())


def build(chunks: int, vocabulary: int):
    """A fresh tenant whose one KB version holds ``chunks`` synthetic passages and their graph."""
    from django.db import connection, transaction

    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.models import Chunk, Document, GraphEdge, GraphEntity, GraphMention, GraphPassageRelations
    from tenants.services import create_tenant

    tenant = create_tenant(results.unique_name("bench-graph-scale"))
    kb = create_knowledge_base(tenant=tenant, name="scale")
    version = kb.active_version
    document = Document.objects.create(knowledge_base=kb, tenant=tenant, source_uri="synthetic", title="synthetic")
    scope = {"tenant": tenant.pk, "version": version.pk}
    tables = {
        "chunks": Chunk._meta.db_table, "entities": GraphEntity._meta.db_table,
        "mentions": GraphMention._meta.db_table, "edges": GraphEdge._meta.db_table,
        "passage_relations": GraphPassageRelations._meta.db_table,
    }  # fmt: skip
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        # the rows below are consistent by construction: no per-row foreign-key triggers (superuser only)
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            f"""
            INSERT INTO {tables["chunks"]} (document_id, kb_version_id, tenant_id, knowledge_base_id, ordinal,
                content, content_hash, token_count, embedding_dim, embedding, doc_type, created_at, tags, metadata)
            SELECT %(document)s, %(version)s, %(tenant)s, %(kb)s, n, 'synthetic passage ' || n, md5(n::text), 10, 3,
                '[0,0,1]', 'txt', now(), '{{}}', '{{}}'
            FROM generate_series(0, %(chunks)s - 1) AS n
            """,
            {**scope, "document": document.pk, "kb": kb.pk, "chunks": chunks},
        )
        cursor.execute(
            f"""
            INSERT INTO {tables["entities"]} (tenant_id, kb_version_id, name, label, kind, chunk_count)
            SELECT %(tenant)s, %(version)s, format('ent-%%s', lpad(n::text, 5, '0')),
                   format('ENT-%%s', lpad(n::text, 5, '0')), 'code', 0
            FROM generate_series(0, %(vocabulary)s - 1) AS n
            """,
            {**scope, "vocabulary": vocabulary},
        )
        cursor.execute(f"ANALYZE {tables['chunks']}, {tables['entities']}")  # else the join below loops
        cursor.execute("SELECT setseed(0.12)")
        # rank = floor(exp(u ln(V + 1))) - 1 draws rank r with probability ~ 1 / (r + 1): Zipf-like, s = 1
        cursor.execute(
            f"""
            CREATE TEMPORARY TABLE draws ON COMMIT DROP AS
            SELECT c.id AS chunk_id, min(d.position) AS position, e.id AS entity_id
            FROM {tables["chunks"]} AS c CROSS JOIN LATERAL (
                SELECT position, least(floor(exp(random() * ln(%(vocabulary)s + 1)))::int - 1,
                                       %(vocabulary)s - 1) + 0 * c.id AS rank
                FROM generate_series(1, %(per_chunk)s) AS position
            ) AS d JOIN (
                SELECT id, substr(name, 5)::int AS rank FROM {tables["entities"]} WHERE kb_version_id = %(version)s
            ) AS e ON e.rank = d.rank
            WHERE c.kb_version_id = %(version)s
            GROUP BY c.id, e.id
            """,
            {**scope, "vocabulary": vocabulary, "per_chunk": ENTITIES_PER_CHUNK},
        )
        cursor.execute(
            f"""
            INSERT INTO {tables["mentions"]} (tenant_id, kb_version_id, entity_id, chunk_id, count)
            SELECT %(tenant)s, %(version)s, entity_id, chunk_id, 1 FROM draws
            """,
            scope,
        )
        cursor.execute(
            """
            CREATE TEMPORARY TABLE pairs ON COMMIT DROP AS
            SELECT chunk_id, least(entity_id, next) AS a, greatest(entity_id, next) AS b
            FROM (
                SELECT chunk_id, entity_id, lead(entity_id) OVER (PARTITION BY chunk_id ORDER BY position) AS next
                FROM draws
            ) AS step
            WHERE step.next IS NOT NULL
            """
        )
        cursor.execute(
            f"""
            INSERT INTO {tables["edges"]} (tenant_id, kb_version_id, source_id, target_id, kind, weight, passages)
            SELECT %(tenant)s, %(version)s, a, b, '', 0.5 * count(*), count(*) FROM pairs GROUP BY a, b
            """,
            scope,
        )
        cursor.execute(
            f"""
            INSERT INTO {tables["passage_relations"]} (chunk_id, tenant_id, kb_version_id, source_ids, target_ids,
                                                       weights, kinds)
            SELECT chunk_id, %(tenant)s, %(version)s, array_agg(a), array_agg(b), array_agg(0.5::float8),
                   array_agg(''::text)
            FROM pairs GROUP BY chunk_id
            """,
            scope,
        )
        cursor.execute(
            f"""
            UPDATE {tables["entities"]} AS e SET chunk_count = counted.n
            FROM (SELECT entity_id, count(*) AS n FROM draws GROUP BY entity_id) AS counted
            WHERE e.id = counted.entity_id
            """
        )
        cursor.execute(f"DELETE FROM {tables['entities']} WHERE kb_version_id = %(version)s AND chunk_count = 0", scope)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute(
            f"""SELECT (SELECT count(*) FROM {tables["entities"]} WHERE kb_version_id = %(version)s),
                       (SELECT count(*) FROM {tables["mentions"]} WHERE kb_version_id = %(version)s),
                       (SELECT count(*) FROM {tables["edges"]} WHERE kb_version_id = %(version)s)""",
            scope,
        )
        entities, mentions, edges = cursor.fetchone()
    print(f"built {chunks} chunks: {entities} entities (vocabulary {vocabulary}), {mentions} mentions, "
          f"{edges} edges, in {time.perf_counter() - started:.1f} s")  # fmt: skip
    return tenant


def communities(tenant) -> None:
    """Reading the version's edges and Leiden on them, timed (the community task's two big steps)."""
    from engines.community_detection import detect_communities
    from knowledge.stores import graph_store

    version = tenant.knowledge_bases.get().active_version
    started = time.perf_counter()
    edges = graph_store().edges(tenant.pk, version.pk)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    partitions = detect_communities(edges, levels=2, split_size=30, min_size=3)
    leiden_s = time.perf_counter() - started
    levels = {level: sum(1 for p in partitions if p.level == level) for level in (0, 1)}
    print(f"edges: {len(edges)} read in {read_s:.2f} s; Leiden {leiden_s:.2f} s -> communities per level {levels}")


def measure(tenant, vocabulary: int, queries: int, rounds: int) -> None:
    """The graph leg over the same queries (one or two random codes of the vocabulary): hops 1, hops 2,
    and hops 2 with three-way hybrid's bridge read (``bridges_from`` of the ranking's anchors), each as
    ``retrieve_graph`` does it (the search's setup, the explanations of the hits it keeps), interleaved
    (the machine's load drifts). The tenant's knowledge is read once: a search reads it for every leg."""
    from django.conf import settings

    from graph.ranking import bridges_from, rank_by_graph
    from knowledge.selectors.search import searched_knowledge

    version = tenant.knowledge_bases.get().active_version
    knowledge = searched_knowledge(tenant)
    rng = random.Random(13)
    texts = [
        " ".join(f"ent-{rng.randrange(vocabulary):05d}" for _ in range(rng.choice((1, 2)))) for _ in range(queries)
    ]

    def leg(text: str, hops: int, bridges: bool) -> int:
        ranking = rank_by_graph(tenant.pk, (version.pk,), text, hops=hops, **_search_setup(tenant, knowledge))
        _explain(ranking, settings.SEARCH_CANDIDATES)
        if bridges:
            bridges_from(tenant.pk, (version.pk,), ranking.anchors[: settings.GRAPH_BRIDGE_ANCHORS])
        return len(ranking.hits)

    leg(texts[0], 1, True)  # warm: the extractor, the connection
    for _ in range(rounds):
        for name, hops, bridges in (("hops 1", 1, False), ("hops 2", 2, False), ("hops 2 + bridges", 2, True)):
            seconds, hits = [], []
            for text in texts:
                started = time.perf_counter()
                hits.append(leg(text, hops, bridges))
                seconds.append(time.perf_counter() - started)
            summary = stats.summarize_ms(seconds)
            print(f"graph leg, {name}, {len(texts)} queries: p50 {summary['p50_ms']} ms, "
                  f"p95 {summary['p95_ms']} ms; median hits {sorted(hits)[len(hits) // 2]}; "
                  f"load {os.getloadavg()[0]:.1f}")  # fmt: skip


def _search_setup(tenant, knowledge) -> dict:
    """``rank_by_graph``'s ``setup`` as a search builds it (none before it took one: ``--code``)."""
    try:
        from graph.query_setup import graph_setup_of
    except ImportError:
        return {}
    return {"setup": graph_setup_of(tenant.pk, knowledge)}


def _explain(ranking, depth: int) -> None:
    """The paths of the hits the leg keeps (an older ranking, ``--code``, built every hit's path)."""
    if hasattr(ranking, "explanation"):
        for chunk_id, _ in ranking.hits[:depth]:
            ranking.explanation(chunk_id)


if __name__ == "__main__":
    main()
