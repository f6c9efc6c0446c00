"""The three stores over this app's tables (``engines.registry`` picks and builds them from settings,
once per process; this names the tables), and the pgvector index's upkeep. The Ingester, the version
lifecycle and the search call the stores only through these accessors and their protocols
(``engines.base``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet

from engines import registry
from engines.base import ChunkRow, GraphStore, LexicalIndex, VectorIndex
from engines.pgvector_index import PgVectorIndex, RebuildAdvice
from knowledge.models import (
    Chunk,
    GraphCommunity,
    GraphEdge,
    GraphEntity,
    GraphMention,
    GraphPassageRelations,
    KnowledgeBaseVersion,
)


def store_tables() -> registry.StoreTables:
    return registry.StoreTables(
        chunks=Chunk._meta.db_table,
        graph_entities=GraphEntity._meta.db_table,
        graph_mentions=GraphMention._meta.db_table,
        graph_edges=GraphEdge._meta.db_table,
        graph_passage_relations=GraphPassageRelations._meta.db_table,
        graph_communities=GraphCommunity._meta.db_table,
    )


def vector_index() -> VectorIndex[Any]:
    """Dense search over passages' vectors (pgvector: the chunk table)."""
    return registry.vector_index(store_tables())


def lexical_index() -> LexicalIndex:
    """BM25 over passages' analyzed text, one index per KB version."""
    return registry.lexical_index()


def graph_store() -> GraphStore:
    """Entities, relations and mentions: in Neo4j when ``NEO4J_URL`` is set, else in this app's tables."""
    return registry.graph_store(store_tables())


def pgvector_index() -> PgVectorIndex | None:
    """The vector index when it is pgvector's (its HNSW graphs and column storage have upkeep), else None."""
    index = vector_index()
    return index if isinstance(index, PgVectorIndex) else None


def apply_vector_column_storage(**kwargs: object) -> None:
    """After every ``migrate`` (a ``post_migrate`` receiver): the chunk table's vector column gets
    ``VECTOR_COLUMN_STORAGE`` back, since a migration that alters the column's type resets its storage to
    the type's default. A catalog change only, and none when the storage is already that (or the table is
    gone: migrated back to zero)."""
    index = pgvector_index()
    if index is not None and Chunk._meta.db_table in connection.introspection.table_names():
        index.set_column_storage(settings.VECTOR_COLUMN_STORAGE)


def rebuild_vector_indexes(dimension: int | None = None) -> dict[int, bool]:
    """Give the HNSW index of ``dimension`` (default: every dimension a KB version uses) the build
    parameters ``HNSW_M`` and ``HNSW_EF_CONSTRUCTION`` name (unset: chosen from its rows), online;
    dimension -> whether it was rebuilt (False: it had them already). For an index grown past what its
    build recalls well (:func:`vector_rebuild_advice`, docs/operations.md). On Milvus: every chunk row's
    vector and filter fields written to Milvus again from the chunk table (a Milvus that lost them, a
    move from pgvector, or filter fields a relabel changed)."""
    dimensions = [dimension] if dimension is not None else dimensions_in_use()
    index = vector_index()
    if index.name == "milvus":
        from engines.milvus_index import MilvusVectorIndex  # pymilvus loads only where it is used

        assert isinstance(index, MilvusVectorIndex)
        return {dim: index.rewrite(chunk_rows_of(Chunk.objects.filter(embedding_dim=dim))) > 0 for dim in dimensions}
    pg = pgvector_index()
    return {dim: pg.rebuild_index(dim) for dim in dimensions} if pg is not None else {}


def refresh_vector_fields(chunks: QuerySet[Chunk]) -> None:
    """After a relabel or an ACL change of these chunk rows, in the same transaction: an index that keeps
    their filter fields apart from the rows (Milvus) is given them again; pgvector reads the rows."""
    index = vector_index()
    if index.name == "milvus":
        from engines.milvus_index import MilvusVectorIndex

        assert isinstance(index, MilvusVectorIndex)
        index.rewrite(chunk_rows_of(chunks))


def chunk_rows_of(chunks: QuerySet[Chunk]) -> Iterator[tuple[ChunkRow, int]]:
    """Stored chunks as the vector index takes them, each with its id (read in batches, by id)."""
    for chunk in chunks.order_by("pk").iterator(chunk_size=2000):
        row = ChunkRow(
            document_id=chunk.document_id, version_id=chunk.kb_version_id, tenant_id=chunk.tenant_id,
            knowledge_base_id=chunk.knowledge_base_id, ordinal=chunk.ordinal, content=chunk.content,
            content_hash=chunk.content_hash, token_count=chunk.token_count, embedding=chunk.embedding,
            doc_type=chunk.doc_type, created_at=chunk.created_at, tags=list(chunk.tags), metadata=chunk.metadata,
            acl=list(chunk.acl), parent_id=chunk.parent_id,
        )  # fmt: skip
        yield row, chunk.pk


def dimensions_in_use() -> list[int]:
    return sorted(set(KnowledgeBaseVersion.objects.values_list("embedding_dim", flat=True)))


def vector_rebuild_advice(dimensions: list[int] | None = None) -> list[RebuildAdvice]:
    """The HNSW indexes (of ``dimensions``, default every one in use) built for fewer rows than they now
    hold: recall@10 falls short of 0.95 until ``manage.py rebuild_vector_index``."""
    index = pgvector_index()
    if index is None:
        return []
    advice = (index.rebuild_advice(dim) for dim in (dimensions_in_use() if dimensions is None else dimensions))
    return [item for item in advice if item is not None]
