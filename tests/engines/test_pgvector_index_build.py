"""``PgVectorIndex.rebuild_index`` on the real table: new build parameters, online, the graph still
searched. Committed (CREATE INDEX CONCURRENTLY refuses a transaction), so each test puts the index back
as the suite's defaults build it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk
from tests.engines.test_pgvector_index import HNSW_INDEX, NO_FILTER, add_chunks, fresh_query, graph_walk_only, scope_of
from tests.factories import DIMENSION, DocumentFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db(transaction=True)

CHUNKS = Chunk._meta.db_table


def index_state(name: str = HNSW_INDEX) -> tuple[list[str], bool] | None:
    """The index's reloptions and whether PostgreSQL holds it valid; None when there is none."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reloptions, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()
    return (sorted(row[0] or []), row[1]) if row else None


@pytest.fixture
def defaults() -> Iterator[PgVectorIndex]:
    """The index as the suite builds it (the settings' m and ef_construction), before and after."""
    engine = PgVectorIndex(CHUNKS)
    engine.ensure_index(DIMENSION)
    yield engine
    engine.rebuild_index(DIMENSION)


def test_a_rebuild_gives_the_index_new_parameters_and_it_still_finds_the_rows(defaults):
    kb = KnowledgeBaseFactory()
    chunks = add_chunks(DocumentFactory(knowledge_base=kb), [fresh_query() for _ in range(60)])
    target = chunks[17]
    built = defaults.build_parameters(DIMENSION)  # the settings', or where unset chosen from the rows
    assert index_state() == ([f"ef_construction={built.ef_construction}", f"m={built.m}"], True)

    smaller = PgVectorIndex(CHUNKS, m=8, ef_construction=32, exact_scan_threshold=0)
    assert smaller.rebuild_index(DIMENSION) is True

    assert index_state() == (["ef_construction=32", "m=8"], True)
    assert index_state(f"{HNSW_INDEX}_rebuild") is None
    with graph_walk_only():
        hits = smaller.search(scope_of(kb), target.embedding, 5, NO_FILTER)
    assert hits[0].chunk_id == target.pk  # its own vector: the new graph holds the committed rows
    assert smaller.rebuild_index(DIMENSION) is False  # built with them already: left alone


def test_a_rebuild_replaces_what_a_failed_one_left_under_its_building_name(defaults):
    with connection.cursor() as cursor:  # an interrupted CREATE INDEX CONCURRENTLY leaves its index
        cursor.execute(f"CREATE INDEX {HNSW_INDEX}_rebuild ON {CHUNKS} (id)")

    assert PgVectorIndex(CHUNKS, m=12, ef_construction=48).rebuild_index(DIMENSION) is True

    assert index_state() == (["ef_construction=48", "m=12"], True)
    assert index_state(f"{HNSW_INDEX}_rebuild") is None


def test_a_dimension_outside_pgvectors_range_is_refused():
    with pytest.raises(ValueError, match="outside"):
        PgVectorIndex(CHUNKS).rebuild_index(0)
