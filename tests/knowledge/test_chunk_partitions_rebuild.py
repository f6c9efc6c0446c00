"""``rebuild_vector_index`` on the chunk table partitioned by tenant: CREATE INDEX CONCURRENTLY refuses a
partitioned table, so each partition's graph is built CONCURRENTLY and attached to a new parent index,
which then takes the old one's name. Committed (CONCURRENTLY refuses a transaction), so the fixture
converts the table back (``partition_chunks --merge``) and gives the index the suite's build again."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection

from engines import chunk_partitions, pgvector_index
from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk
from tests.engines.pgvector_rows import HNSW_INDEX, NO_FILTER, add_chunks, fresh_query, graph_walk_only, scope_of
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db(transaction=True)

CHUNKS = Chunk._meta.db_table


@pytest.fixture
def partitioned() -> Iterator[None]:
    PgVectorIndex(CHUNKS).ensure_index(DIMENSION)
    call_command("partition_chunks", stdout=io.StringIO())
    yield
    if chunk_partitions.is_partitioned(CHUNKS):
        call_command("partition_chunks", "--merge", stdout=io.StringIO())
    PgVectorIndex(CHUNKS).rebuild_index(DIMENSION)
    pgvector_index._rows_in_index.cache_clear()


def graphs() -> dict[str, tuple[list[str], bool]]:
    """The HNSW index's partitions' graphs: the partition they index -> (reloptions, valid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT x.indrelid::regclass::text, c.reloptions, x.indisvalid FROM pg_inherits i "
            "JOIN pg_index x ON x.indexrelid = i.inhrelid JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [HNSW_INDEX],
        )
        return {table: (sorted(options or []), valid) for table, options, valid in cursor.fetchall()}


def test_a_rebuild_builds_each_partitions_graph_and_searches_still_find_the_rows(partitioned):
    large_kb, small_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    large = add_chunks(DocumentFactory(knowledge_base=large_kb), [fresh_query() for _ in range(40)])
    small = add_chunks(DocumentFactory(knowledge_base=small_kb), [fresh_query() for _ in range(20)])
    call_command("partition_chunks", "--own", str(large_kb.tenant_id), stdout=io.StringIO())
    own, default = f"{CHUNKS}_t{large_kb.tenant_id}", f"{CHUNKS}_default"

    smaller = PgVectorIndex(CHUNKS, m=8, ef_construction=32, exact_scan_threshold=0)
    assert smaller.rebuild_index(DIMENSION) is True

    assert smaller.built_with(DIMENSION) == (8, 32)
    assert graphs() == {own: (["ef_construction=32", "m=8"], True), default: (["ef_construction=32", "m=8"], True)}
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname LIKE %s", [f"{HNSW_INDEX}_rebuild%"])
        assert cursor.fetchone()[0] == 0
    for kb, chunks in (large_kb, large), (small_kb, small):
        with graph_walk_only():
            hits = smaller.search(scope_of(kb), chunks[7].embedding, 5, NO_FILTER)
        assert hits[0].chunk_id == chunks[7].pk
    assert smaller.rebuild_index(DIMENSION) is False  # built with them already: left alone


def test_ef_search_is_sized_from_the_graph_of_the_tenants_partition(partitioned):
    large_kb, small_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    add_chunks(DocumentFactory(knowledge_base=large_kb), [fresh_query() for _ in range(40)])
    add_chunks(DocumentFactory(knowledge_base=small_kb), [fresh_query() for _ in range(20)])
    call_command("partition_chunks", "--own", str(large_kb.tenant_id), stdout=io.StringIO())
    PgVectorIndex(CHUNKS, m=8, ef_construction=32).rebuild_index(DIMENSION)  # fresh counts of each graph
    pgvector_index._rows_in_index.cache_clear()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {CHUNKS}_default WHERE embedding_dim = %s", [DIMENSION])
        default_rows = cursor.fetchone()[0]

    assert pgvector_index._rows_in_index(DIMENSION, large_kb.tenant_id, CHUNKS) == 40
    assert pgvector_index._rows_in_index(DIMENSION, small_kb.tenant_id, CHUNKS) == default_rows
    assert pgvector_index._rows_in_index(DIMENSION, None, CHUNKS) == 40 + default_rows  # the rebuild advice's


def default_graph() -> tuple[int, bool, object]:
    """The DEFAULT partition's graph: (its index's oid, valid), and when the partition was last vacuumed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT x.indexrelid, x.indisvalid, s.last_vacuum FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
            "JOIN pg_am a ON a.oid = c.relam JOIN pg_stat_user_tables s ON s.relid = x.indrelid "
            "WHERE x.indrelid = %s::regclass AND a.amname = 'hnsw'",
            [f"{CHUNKS}_default"],
        )
        return cursor.fetchone()


def test_own_builds_the_default_partitions_graph_again_without_the_rows_moved_out(partitioned):
    """A vacuum repairs an HNSW graph around each deleted row, which at 1M took longer than a build
    (BENCHMARKS.md, "Tenant partitions at 1M"): the rows moved out leave the graph by a REINDEX."""
    large_kb, small_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    add_chunks(DocumentFactory(knowledge_base=large_kb), [fresh_query() for _ in range(40)])
    small = add_chunks(DocumentFactory(knowledge_base=small_kb), [fresh_query() for _ in range(20)])
    before, _, _ = default_graph()

    call_command("partition_chunks", "--own", str(large_kb.tenant_id), stdout=io.StringIO())

    after, valid, vacuumed = default_graph()
    assert after != before and valid and vacuumed is not None
    with graph_walk_only():
        hits = PgVectorIndex(CHUNKS, exact_scan_threshold=0).search(
            scope_of(small_kb), small[3].embedding, 5, NO_FILTER
        )
    assert hits[0].chunk_id == small[3].pk


def test_a_merge_of_large_own_partitions_builds_the_graph_after_the_copy(partitioned, monkeypatch):
    large_kb, small_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    large = add_chunks(DocumentFactory(knowledge_base=large_kb), [fresh_query() for _ in range(40)])
    small = add_chunks(DocumentFactory(knowledge_base=small_kb), [fresh_query() for _ in range(20)])
    call_command("partition_chunks", "--own", str(large_kb.tenant_id), stdout=io.StringIO())
    monkeypatch.setattr(chunk_partitions, "MERGE_REBUILD_ROWS", 39)  # the own partition's 40 rows are more
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef(%s::regclass)", [HNSW_INDEX])
        definition = cursor.fetchone()[0].replace(" ON ONLY ", " ON ")
    out = io.StringIO()

    call_command("partition_chunks", "--merge", stdout=out)

    assert "building its HNSW graphs again" in out.getvalue() and f"built {HNSW_INDEX}" in out.getvalue()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(x.indexrelid), x.indisvalid FROM pg_index x WHERE x.indexrelid = %s::regclass",
            [HNSW_INDEX],
        )
        assert cursor.fetchone() == (definition, True)
    for kb, chunks in (large_kb, large), (small_kb, small):
        with graph_walk_only():
            hits = PgVectorIndex(CHUNKS, exact_scan_threshold=0).search(scope_of(kb), chunks[5].embedding, 5, NO_FILTER)
        assert hits[0].chunk_id == chunks[5].pk
