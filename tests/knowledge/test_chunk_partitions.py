"""The chunk table partitioned by tenant (``manage.py partition_chunks``) on the real embedded
PostgreSQL: the conversion keeps every chunk and every search answer, a tenant's vector search walks
only its partition's HNSW graph, a large tenant gets a partition of its own and can be detached, and
ingestion, deletes and version switches keep working. The conversion is transactional DDL, so these
tests roll it back with their transaction (test_chunk_partitions_rebuild.py commits one)."""

from __future__ import annotations

import io
import json

import numpy as np
import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from engines import chunk_partitions
from engines.base import SearchScope, SqlFilter
from engines.pgvector_index import PgVectorIndex, register_vector_type
from knowledge.documents import delete_document
from knowledge.knowledge_bases import create_knowledge_base, delete_tenant
from knowledge.models import Chunk, GraphMention
from knowledge.versions import activate_version, fill_version, start_version_build, version_build_files
from tests.conftest import client_for
from tests.engines.pgvector_rows import graph_walk_only
from tests.factories import TenantFactory, give_unlimited_rate_tier
from tests.retrieval.test_permissions import (
    corpus,  # noqa: F401 (the leak matrix's corpus)
    leak_matrix,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

CHUNKS = Chunk._meta.db_table
TEXTS = {  # proper names, so the graph has entities and mentions
    "kettle.txt": "Sheffield Steelworks makes the Vortex kettle: it boils 1.7 litres of water in two minutes.",
    "bicycle.txt": "Harbour Cycles builds the Marlin bicycle with eleven gears and hydraulic disc brakes.",
    "garden.txt": "Kew Gardens says tomato seedlings need six hours of direct sunlight every day.",
}
QUERIES = ["Sheffield Steelworks kettle", "Harbour Cycles bicycle gears", "Kew Gardens tomato sunlight"]
MODES = ("vector", "bm25", "hybrid", "graph")


def ingest(kb, tmp_path, texts: dict[str, str]) -> None:
    folder = tmp_path / f"kb{kb.pk}"
    folder.mkdir(parents=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    call_command("ingest", str(folder), tenant=kb.tenant.name, kb=kb.name, no_progress=True, stdout=io.StringIO())


@pytest.fixture
def tenants(embedder, tmp_path):
    """Three tenants, each with a KB of the same documents (their originals kept, for version builds)."""
    found = []
    for _ in range(3):
        tenant = TenantFactory()
        give_unlimited_rate_tier(tenant)
        kb = create_knowledge_base(tenant=tenant, name="manuals")
        ingest(kb, tmp_path, TEXTS)
        found.append((tenant, kb))
    return found


def answers(tenant, kb) -> dict:
    """Every mode's ranked hits (chunk id, score) for each query, with and without a filter."""
    client = client_for(tenant)
    found = {}
    for mode in MODES:
        for query in QUERIES:
            for filters in (None, {"doc_type": "txt"}, {"not": {"doc_type": "txt"}}):
                body = {"query": query, "mode": mode, "kb_ids": [kb.pk], "top_k": 3}
                if filters is not None:
                    body["filters"] = filters
                response = client.post("/api/v1/retrieval/search", json.dumps(body), content_type="application/json")
                assert response.status_code == 200, response.content
                answer = response.json()
                hits = [(hit["chunk_id"], round(hit["score"], 5)) for hit in answer["results"]]
                found[mode, query, json.dumps(filters)] = (hits, answer["degraded"])
    return found


def partition_chunks(*args: str) -> str:
    out = io.StringIO()
    call_command("partition_chunks", *args, stdout=out)
    return out.getvalue()


def rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, tenant_id, kb_version_id, content_hash, embedding::text FROM {CHUNKS} ORDER BY id")
        return cursor.fetchall()


def rows_read() -> int:
    """Rows of the chunk table's heap read in this transaction so far, by scans of any kind (the old
    table keeps its oid: it becomes the DEFAULT partition)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_returned(c.oid) + pg_stat_get_xact_tuples_fetched(c.oid) "
            "FROM pg_class c WHERE c.relname IN (%s, %s) AND c.relkind = 'r'",
            [CHUNKS, f"{CHUNKS}_default"],
        )
        return cursor.fetchone()[0]


def test_the_conversion_keeps_every_chunk_and_every_answer(tenants):
    before_rows = rows()
    before = {tenant.pk: answers(tenant, kb) for tenant, kb in tenants}
    assert all(before[tenants[0][0].pk][mode, QUERIES[0], "null"][0] for mode in MODES)

    with connection.cursor() as cursor:
        # the writes' deferred key checks run first (as the conversion does), then one index build's heap
        # scan is the yardstick: it reads every tuple, the dead ones earlier tests left included
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        read = rows_read()
        cursor.execute(f"CREATE INDEX scan_yardstick ON {CHUNKS} (tenant_id)")
        one_scan = rows_read() - read
        cursor.execute("DROP INDEX scan_yardstick")
    assert one_scan >= len(before_rows)
    read = rows_read()
    output = partition_chunks()

    assert chunk_partitions.is_partitioned(CHUNKS)
    assert "locked for" in output and f"{CHUNKS}_default: tenants DEFAULT" in output
    # the heap scanned once, by the build of the unique (id, tenant_id) index (CONCURRENTLY before the lock,
    # outside a transaction); under the lock, catalog changes only: no key checked again, no index built
    assert rows_read() - read == one_scan
    assert rows() == before_rows
    assert {tenant.pk: answers(tenant, kb) for tenant, kb in tenants} == before

    large = tenants[1][0]
    output = partition_chunks("--own", str(large.pk))

    moved = Chunk.objects.filter(tenant=large).count()
    assert f"tenant {large.pk}: {moved} chunks moved to {CHUNKS}_t{large.pk}" in output
    assert [(p.name, p.tenant_ids) for p in chunk_partitions.partitions(CHUNKS)] == [
        (f"{CHUNKS}_default", ()),
        (f"{CHUNKS}_t{large.pk}", (large.pk,)),
    ]
    assert rows() == before_rows
    assert {tenant.pk: answers(tenant, kb) for tenant, kb in tenants} == before


def scanned(kb) -> list[tuple[str, str]]:
    """(node type, index or relation) of each scan in the plan of the KB's HNSW walk."""
    engine = PgVectorIndex(CHUNKS, exact_scan_threshold=0)
    scope = SearchScope(tenant_id=kb.tenant_id, version_ids=(kb.active_version_id,), embedding_dim=kb.embedding_dim)
    where, params = engine._where(scope, SqlFilter())
    vector = np.asarray(Chunk.objects.filter(kb_version=kb.active_version).first().embedding, dtype=np.float32)
    register_vector_type()
    with connection.cursor() as cursor, graph_walk_only():
        query, arguments = engine._nearest(cursor, scope.embedding_dim, where, params, vector, 3, False)
        cursor.execute(f"EXPLAIN (FORMAT JSON) {query}", arguments)
        plan = cursor.fetchone()[0][0]["Plan"]
    nodes, found = [plan], []
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        if "Scan" in node["Node Type"]:
            found.append((node["Node Type"], node.get("Index Name") or node["Relation Name"]))
    return found


def hnsw_of(partition: str, dimension: int) -> str:
    """The partition's graph of the dimension: the child of the partitioned HNSW index on it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.inhrelid::regclass::text FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s) AND x.indrelid = to_regclass(%s)",
            [f"chunk_embedding_hnsw_{dimension}", partition],
        )
        return cursor.fetchone()[0]


def test_a_tenants_vector_search_walks_only_its_partitions_graph(tenants):
    partition_chunks()
    (_, small_kb), (large, large_kb) = tenants[0], tenants[1]
    partition_chunks("--own", str(large.pk))
    dimension = large_kb.embedding_dim

    own_graph = hnsw_of(f"{CHUNKS}_t{large.pk}", dimension)
    default_graph = hnsw_of(f"{CHUNKS}_default", dimension)
    assert own_graph != default_graph
    assert scanned(large_kb) == [("Index Scan", own_graph)]
    assert scanned(small_kb) == [("Index Scan", default_graph)]


def test_a_tenants_own_partition_is_detached_without_touching_the_others(tenants):
    partition_chunks()
    (large, _), others = tenants[1], [tenants[0], tenants[2]]
    before = {tenant.pk: answers(tenant, kb) for tenant, kb in others}
    large_rows = Chunk.objects.filter(tenant=large).count()
    partition_chunks("--own", str(large.pk))

    output = partition_chunks("--detach", str(large.pk))

    detached = f"{CHUNKS}_t{large.pk}"
    assert f"its chunks are in table {detached}, detached" in output
    assert [p.name for p in chunk_partitions.partitions(CHUNKS)] == [f"{CHUNKS}_default"]
    assert Chunk.objects.filter(tenant=large).count() == 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {detached}")
        assert cursor.fetchone()[0] == large_rows
        cursor.execute(f"DROP TABLE {detached}")
    assert {tenant.pk: answers(tenant, kb) for tenant, kb in others} == before
    tenant_id = large.pk
    delete_tenant(large)  # what the tenant had outside the chunk table goes the usual way
    assert not GraphMention.objects.filter(tenant_id=tenant_id).exists()


def test_steps_out_of_order_are_refused_with_their_reason(tenants):
    tenant = tenants[0][0]
    with pytest.raises(CommandError, match="not partitioned"):
        partition_chunks("--own", str(tenant.pk))
    partition_chunks()
    assert "tenants DEFAULT" in partition_chunks()  # again: lists the partitions
    with pytest.raises(CommandError, match="no partition of its own"):
        partition_chunks("--detach", str(tenant.pk))
    partition_chunks("--own", str(tenant.pk))
    with pytest.raises(CommandError, match="partition of its own already"):
        partition_chunks("--own", str(tenant.pk))
    with pytest.raises(CommandError, match="no tenant"):
        partition_chunks("--own", "999999")


def test_ingestion_deletes_and_a_version_switch_work_on_the_partitioned_table(tenants, tmp_path, monkeypatch):
    partition_chunks()
    (small, small_kb), (large, large_kb) = tenants[0], tenants[1]
    partition_chunks("--own", str(large.pk))

    for tenant, kb in (small, small_kb), (large, large_kb):
        ingest(kb, tmp_path / f"more{kb.pk}", {"lamp.txt": "The Lumen desk lamp has a dimmable warm white LED."})
        client = client_for(tenant)
        body = {"query": "dimmable desk lamp", "mode": "vector", "kb_ids": [kb.pk], "top_k": 1}
        response = client.post("/api/v1/retrieval/search", json.dumps(body), content_type="application/json")
        assert response.json()["results"][0]["source_uri"].endswith("lamp.txt")
        assert {row.tenant_id for row in Chunk.objects.filter(kb_version=kb.active_version)} == {tenant.pk}

        kettle = kb.documents.get(source_uri__endswith="kettle.txt")
        chunk_ids = list(Chunk.objects.filter(document=kettle).values_list("pk", flat=True))
        assert GraphMention.objects.filter(chunk_id__in=chunk_ids).exists()
        delete_document(kettle)  # the mentions' key to a chunk is no longer checked: the ORM still cascades
        assert not Chunk.objects.filter(pk__in=chunk_ids).exists()
        assert not GraphMention.objects.filter(chunk_id__in=chunk_ids).exists()

    monkeypatch.setattr("knowledge.versions.queue_task", lambda *args: None)  # built here, not by a worker
    version, _ = start_version_build(large_kb, activate=False, chunk_size=64)
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    version.refresh_from_db()
    assert version.status == version.Status.READY, version.error
    activate_version(version)
    assert Chunk.objects.filter(kb_version=version).count() > 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {CHUNKS} WHERE kb_version_id = %s", [version.pk])
        assert cursor.fetchall() == [(f"{CHUNKS}_t{large.pk}",)]
    body = {"query": "bicycle gears", "mode": "hybrid", "kb_ids": [large_kb.pk], "top_k": 1}
    response = client_for(large).post("/api/v1/retrieval/search", json.dumps(body), content_type="application/json")
    answer = response.json()
    assert answer["results"][0]["source_uri"].endswith("bicycle.txt") and answer["degraded"] == []


def schema() -> dict:
    """The chunk table's columns, indexes and constraints, and the keys of other tables to it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, format_type(atttypid, atttypmod), attnotnull, attidentity FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [CHUNKS],
        )
        columns = cursor.fetchall()
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s ORDER BY 1", [CHUNKS])
        indexes = cursor.fetchall()
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE (conrelid = %s::regclass OR confrelid = %s::regclass) AND contype <> 'n' ORDER BY 1, 2",
            [CHUNKS, CHUNKS],
        )
        return {"columns": columns, "indexes": indexes, "constraints": cursor.fetchall()}


def test_merge_is_the_way_back_to_the_same_plain_table(tenants, tmp_path):
    before_schema, before_rows = schema(), rows()
    before = {tenant.pk: answers(tenant, kb) for tenant, kb in tenants[:2]}
    partition_chunks()
    partition_chunks("--own", str(tenants[1][0].pk))
    assert schema() != before_schema

    assert "one table again" in partition_chunks("--merge")

    assert not chunk_partitions.is_partitioned(CHUNKS)
    after = schema()
    assert set(after["constraints"]) - set(before_schema["constraints"]) == set()
    assert set(before_schema["constraints"]) - set(after["constraints"]) == set()
    assert after == before_schema
    assert rows() == before_rows
    assert {tenant.pk: answers(tenant, kb) for tenant, kb in tenants[:2]} == before
    kb = tenants[0][1]
    ingest(kb, tmp_path / "more", {"lamp.txt": "The Lumen desk lamp dims."})  # ids go on from the table's
    assert Chunk.objects.filter(kb_version=kb.active_version).order_by("pk").last().pk > before_rows[-1][0]


def test_a_new_dimensions_index_and_the_vector_columns_storage_reach_every_partition(tenants):
    partition_chunks()
    partition_chunks("--own", str(tenants[1][0].pk))
    partitions = {f"{CHUNKS}_default", f"{CHUNKS}_t{tenants[1][0].pk}"}
    engine = PgVectorIndex(CHUNKS)

    engine.ensure_index(8)  # a KB of a new model's dimension: one graph per partition
    assert engine.built_with(8) is not None
    assert len({hnsw_of(name, 8) for name in partitions}) == 2  # each partition's own graph

    storage = "main" if engine.column_storage() != "main" else "external"
    assert engine.set_column_storage(storage) is True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.attstorage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relname = ANY(%s) AND a.attname = 'embedding'",
            [sorted(partitions)],
        )
        assert dict(cursor.fetchall()) == dict.fromkeys(partitions, storage[0])


def test_a_step_that_cannot_have_its_lock_in_time_changes_nothing(tenants):
    """A long query holds the table (another connection's open read): the conversion gives up after its
    lock timeout, with the reason, rather than hold up every query queued behind its lock."""
    params = connection.get_connection_params()
    reader = psycopg.connect(
        **{key: value for key, value in params.items() if key in {"host", "port", "dbname", "user", "password"}}
    )
    try:
        reader.execute(f"SELECT count(*) FROM {CHUNKS}")  # its transaction holds the table until it ends
        with pytest.raises(CommandError, match="not had within 0.2 s"):
            partition_chunks("--lock-timeout", "0.2")
    finally:
        reader.close()
    assert not chunk_partitions.is_partitioned(CHUNKS)


def test_the_leak_matrix_holds_after_a_populated_table_is_converted(corpus):  # noqa: F811
    tenant, _ = corpus
    partition_chunks()
    assert leak_matrix(corpus) == 6 * 2 * 5 * 3 * 2
    partition_chunks("--own", str(tenant.pk))
    assert leak_matrix(corpus) == 6 * 2 * 5 * 3 * 2
