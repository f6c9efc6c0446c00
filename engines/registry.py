"""The one registry of store implementations: for each protocol of ``engines.base``, its backends in
the order they are tried; the first whose settings choose it serves, each built once per process.

A new backend is one module beside the others plus one ``Backend`` entry here (its ``chosen`` test reads
its setting; the last entry of each list is the default), and it runs the protocol's contract suite
(tests/engines). Engines import no domain model: the tables of the stores kept in the database arrive
as plain names (``StoreTables``, from ``knowledge.stores``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, TypeVar

from django.conf import settings

from engines.base import GraphStore, LexicalIndex, VectorIndex


@dataclass(frozen=True)
class StoreTables:
    """The database tables of the stores that live in PostgreSQL, by name."""

    chunks: str
    graph_entities: str
    graph_mentions: str
    graph_edges: str
    graph_passage_relations: str
    graph_communities: str


NO_TABLES = StoreTables("", "", "", "", "", "")  # what a store outside the database is built with

StoreT = TypeVar("StoreT")


@dataclass(frozen=True)
class Backend(Generic[StoreT]):
    name: str
    chosen: Callable[[], bool]  # whether the settings pick it
    build: Callable[[StoreTables], StoreT]  # imports its client library only when picked


def _pgvector(tables: StoreTables) -> VectorIndex[Any]:
    from engines.pgvector_index import PgVectorIndex

    return PgVectorIndex(tables.chunks)


def _milvus(tables: StoreTables) -> VectorIndex[Any]:
    from engines.milvus_index import MilvusVectorIndex  # pymilvus loads only where it is used

    return MilvusVectorIndex(tables.chunks, settings.MILVUS_URI, timeout_s=settings.MILVUS_TIMEOUT_S)


def _elasticsearch(tables: StoreTables) -> LexicalIndex:
    from engines.elasticsearch_index import ElasticsearchLexicalIndex

    return ElasticsearchLexicalIndex(
        settings.ELASTICSEARCH_URL,
        prefix=settings.ELASTICSEARCH_INDEX_PREFIX,
        search_deadline_s=settings.SEARCH_DEADLINE_MS / 1000,
    )


def _tantivy(tables: StoreTables) -> LexicalIndex:
    from engines.tantivy_index import TantivyLexicalIndex

    return TantivyLexicalIndex(settings.LEXICAL_INDEX_DIR)


def _neo4j(tables: StoreTables) -> GraphStore:
    from engines.neo4j_graph import Neo4jGraphStore  # neomodel loads only where it is used

    return Neo4jGraphStore(settings.NEO4J_URL, timeout_s=settings.NEO4J_TIMEOUT_S)


def _postgres_graph(tables: StoreTables) -> GraphStore:
    from engines.postgres_graph import PostgresGraphStore

    return PostgresGraphStore(
        entities=tables.graph_entities,
        mentions=tables.graph_mentions,
        edges=tables.graph_edges,
        passage_relations=tables.graph_passage_relations,
        communities=tables.graph_communities,
        chunks=tables.chunks,
    )


def _always() -> bool:
    return True


VECTOR_INDEXES: list[Backend[VectorIndex[Any]]] = [
    Backend("milvus", lambda: settings.VECTOR_BACKEND == "milvus", _milvus),
    Backend("pgvector", _always, _pgvector),
]
LEXICAL_INDEXES: list[Backend[LexicalIndex]] = [
    Backend("elasticsearch", lambda: bool(settings.ELASTICSEARCH_URL), _elasticsearch),
    Backend("tantivy", _always, _tantivy),
]
GRAPH_STORES: list[Backend[GraphStore]] = [
    Backend("neo4j", lambda: bool(settings.NEO4J_URL), _neo4j),
    Backend("postgres", _always, _postgres_graph),
]


def chosen(backends: list[Backend[StoreT]]) -> Backend[StoreT]:
    """The first backend the settings pick (the last one is every list's default)."""
    return next(backend for backend in backends if backend.chosen())


@lru_cache(maxsize=1)
def vector_index(tables: StoreTables) -> VectorIndex[Any]:
    """Dense search: Milvus when ``VECTOR_BACKEND`` is milvus, else pgvector over the chunk table."""
    return chosen(VECTOR_INDEXES).build(tables)


@lru_cache(maxsize=1)
def lexical_index() -> LexicalIndex:
    """BM25: Elasticsearch when ``ELASTICSEARCH_URL`` is set, else the embedded tantivy index (no tables)."""
    return chosen(LEXICAL_INDEXES).build(NO_TABLES)


@lru_cache(maxsize=1)
def graph_store(tables: StoreTables) -> GraphStore:
    """Entities, relations and mentions: Neo4j when ``NEO4J_URL`` is set, else the graph tables."""
    return chosen(GRAPH_STORES).build(tables)


def clear() -> None:
    """Forget the stores built so far (a test that changes the settings they were built from)."""
    for factory in (vector_index, lexical_index, graph_store):
        factory.cache_clear()
