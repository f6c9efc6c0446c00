"""The engines over this app's tables, configured once per process."""
from __future__ import annotations

from functools import lru_cache

from engines.pgvector_index import PgVectorIndex
from knowledge.models import Chunk


@lru_cache(maxsize=1)
def vector_index() -> PgVectorIndex:
    """Dense search over the chunk table (pgvector)."""
    return PgVectorIndex(Chunk._meta.db_table)
