"""The engines over this app's tables, configured once per process."""
from __future__ import annotations

from functools import lru_cache

from engines.pgvector_index import PgVectorIndex
from engines.postgres_graph import PostgresGraphStore
from knowledge.models import Chunk, GraphEntity, GraphMention, GraphRelation


@lru_cache(maxsize=1)
def vector_index() -> PgVectorIndex:
    """Dense search over the chunk table (pgvector)."""
    return PgVectorIndex(Chunk._meta.db_table)


@lru_cache(maxsize=1)
def graph_store() -> PostgresGraphStore:
    """Entities, relations and mentions in this app's graph tables."""
    return PostgresGraphStore(
        entities=GraphEntity._meta.db_table,
        mentions=GraphMention._meta.db_table,
        relations=GraphRelation._meta.db_table,
        chunks=Chunk._meta.db_table,
    )
