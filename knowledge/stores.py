"""The engines over this app's tables, configured once per process."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.db import connection

from engines.base import GraphStore
from engines.pgvector_index import PgVectorIndex, RebuildAdvice
from engines.postgres_graph import PostgresGraphStore
from knowledge.models import (
    Chunk,
    GraphCommunity,
    GraphEdge,
    GraphEntity,
    GraphMention,
    GraphPassageRelations,
    KnowledgeBaseVersion,
)


@lru_cache(maxsize=1)
def vector_index() -> PgVectorIndex:
    """Dense search over the chunk table (pgvector)."""
    return PgVectorIndex(Chunk._meta.db_table)


def apply_vector_column_storage(**kwargs: object) -> None:
    """After every ``migrate`` (a ``post_migrate`` receiver): the chunk table's vector column gets
    ``VECTOR_COLUMN_STORAGE`` back, since a migration that alters the column's type resets its storage to
    the type's default. A catalog change only, and none when the storage is already that (or the table is
    gone: migrated back to zero)."""
    if Chunk._meta.db_table in connection.introspection.table_names():
        vector_index().set_column_storage(settings.VECTOR_COLUMN_STORAGE)


def rebuild_vector_indexes(dimension: int | None = None) -> dict[int, bool]:
    """Give the HNSW index of ``dimension`` (default: every dimension a KB version uses) the build
    parameters ``HNSW_M`` and ``HNSW_EF_CONSTRUCTION`` name (unset: chosen from its rows), online;
    dimension -> whether it was rebuilt (False: it had them already). For an index grown past what its
    build recalls well (:func:`vector_rebuild_advice`, docs/operations.md)."""
    dimensions = [dimension] if dimension is not None else dimensions_in_use()
    index = vector_index()
    return {dim: index.rebuild_index(dim) for dim in dimensions}


def dimensions_in_use() -> list[int]:
    return sorted(set(KnowledgeBaseVersion.objects.values_list("embedding_dim", flat=True)))


def vector_rebuild_advice(dimensions: list[int] | None = None) -> list[RebuildAdvice]:
    """The HNSW indexes (of ``dimensions``, default every one in use) built for fewer rows than they now
    hold: recall@10 falls short of 0.95 until ``manage.py rebuild_vector_index``."""
    index = vector_index()
    advice = (index.rebuild_advice(dim) for dim in (dimensions_in_use() if dimensions is None else dimensions))
    return [item for item in advice if item is not None]


@lru_cache(maxsize=1)
def graph_store() -> GraphStore:
    """Entities, relations and mentions: in Neo4j when ``NEO4J_URL`` is set, else in this app's tables."""
    if settings.NEO4J_URL:
        from engines.neo4j_graph import Neo4jGraphStore  # neomodel loads only where it is used

        return Neo4jGraphStore(settings.NEO4J_URL, timeout_s=settings.NEO4J_TIMEOUT_S)
    return PostgresGraphStore(
        entities=GraphEntity._meta.db_table,
        mentions=GraphMention._meta.db_table,
        edges=GraphEdge._meta.db_table,
        passage_relations=GraphPassageRelations._meta.db_table,
        communities=GraphCommunity._meta.db_table,
        chunks=Chunk._meta.db_table,
    )
