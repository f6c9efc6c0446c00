"""Dense search in Milvus (``VECTOR_BACKEND=milvus``): the vectors and the fields filters read live in
Milvus, one collection per embedding dimension with the tenant as its partition key; the chunk rows
(text, filters for hydration, and the vectors too, the source a rebuild reads) stay in PostgreSQL.

``MILVUS_URI`` names the server (``http://host:19530``) or a local file, which opens Milvus Lite, the
embedded Milvus the tests run: it serves the one process that opened the file, so a service with web
workers and a Celery worker needs a server. Every call carries the deadline ``MILVUS_TIMEOUT_S``.

Small scopes, and scores by id: a search whose scope and filter keep few rows (up to the exact-scan
limit, counted in the chunk table as pgvector counts them: :meth:`PgVectorIndex.plan`) is answered by
an exact scan of those rows in PostgreSQL, which holds them. A graph walk that skips the rows a selective filter excludes
misses true neighbours (Milvus Lite walks FAISS's HNSW so: docs/BENCHMARKS.md, "Milvus against
pgvector"), and the scan of a few rows costs less than the walk; Milvus answers every larger scope.
The dense scores of passages another retriever found (``similarities``) are read by id there too.

Filters: Milvus cannot run SQL, so a filtered search needs the filter as plain data
(``engines.lexical_filter``, the tree the keyword index applies), given exactly; each entity carries the
same terms the keyword index stores (its doc type, tags, scalar metadata values and ACL principals) and
its creation time, so a tree compiles to a Milvus boolean expression with the keyword index's
semantics (:func:`milvus_expression`). A filter without its exact tree is refused
(:class:`VectorIndexError`): a wider filter would return rows the caller may not see.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.db import connection
from psycopg import sql
from pymilvus import DataType, MilvusClient, MilvusException

from engines import lexical_filter as lf
from engines.base import ChunkRow, SearchScope, SqlFilter, VectorHit, VectorIndex
from engines.errors import ComponentError
from engines.pgvector_index import PgVectorIndex

MAX_TERMS = 4096  # Milvus's largest ARRAY capacity; a chunk's terms past it are left out (fail closed)
MAX_TERM_BYTES = 4096
HNSW_M, HNSW_EF_CONSTRUCTION = 24, 128  # the build pgvector chooses from 300k rows (engines.hnsw_parameters)
MIN_EF = 200
REWRITE_BATCH = 1000


class VectorIndexError(ComponentError):
    """The vector index cannot answer (down, over its deadline, or a filter it cannot apply exactly)."""


class MilvusVectorIndex(VectorIndex[int]):
    """Vectors in Milvus; the chunk rows written into ``table`` by pgvector's COPY first, for their ids.
    The plan is pgvector's: the rows in scope, counted up to one past the exact-scan limit."""

    name = "milvus"

    def __init__(
        self,
        table: str,
        uri: str,
        *,
        timeout_s: float,
        prefix: str = "chunks",
        exact_scan_threshold: int | None = None,
    ):
        self.table = table
        self.uri = uri
        self.timeout_s = timeout_s
        self.prefix = prefix
        # the chunk rows' writer (one binary COPY), and the exact scan of small scopes
        self.rows = PgVectorIndex(table, exact_scan_threshold=exact_scan_threshold)
        self._client: MilvusClient | None = None
        self._lock = threading.Lock()
        self._ready: set[int] = set()  # dimensions whose collection exists and is loaded

    # --- the client -------------------------------------------------------------------------------

    @property
    def client(self) -> MilvusClient:
        with self._lock:
            if self._client is None:
                try:
                    try:
                        self._client = MilvusClient(self.uri, timeout=self.timeout_s)
                    except MilvusException:
                        # pymilvus reuses a cached connection to the URI; one to a Milvus Lite server that
                        # has since stopped fails once and is dropped, and the next connect starts it again
                        self._client = MilvusClient(self.uri, timeout=self.timeout_s)
                except MilvusException as error:
                    # Milvus Lite serves the process that opened its file first, and no other.
                    lite = "" if "://" in self.uri else " (a Milvus Lite file serves one process only)"
                    message = f"Milvus at {self.uri}{lite}: {error}"
                    raise VectorIndexError("vector_index_unavailable", message) from error
            return self._client

    def ping(self) -> str:
        """The server's version when it answers within the deadline (``/ready``)."""
        return f"Milvus {self._call('get_server_version', self.client.get_server_version)}"

    def collection(self, dimension: int) -> str:
        return f"{self.prefix}_d{dimension}"

    def _call(self, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, timeout=self.timeout_s, **kwargs)
        except MilvusException as error:
            raise VectorIndexError("vector_index_unavailable", f"Milvus {what}: {error}") from error

    def ensure_collection(self, dimension: int) -> str:
        """The dimension's collection, made and loaded the first time (idempotent)."""
        name = self.collection(dimension)
        if dimension in self._ready:
            return name
        client = self.client
        if not self._call("has_collection", client.has_collection, name):
            schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("id", DataType.INT64, is_primary=True)  # the chunk row's id
            schema.add_field("tenant_id", DataType.INT64, is_partition_key=True)
            schema.add_field("version_id", DataType.INT64)
            schema.add_field("document_id", DataType.INT64)
            schema.add_field("created_at_us", DataType.INT64)
            schema.add_field("content_hash", DataType.VARCHAR, max_length=128)
            schema.add_field(
                "terms", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=MAX_TERMS,
                max_length=MAX_TERM_BYTES,
            )  # fmt: skip
            schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=dimension)
            index = client.prepare_index_params()
            index.add_index(
                "embedding", index_type="HNSW", metric_type="COSINE",
                params={"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION},
            )  # fmt: skip
            self._call("create_collection", client.create_collection, name, schema=schema, index_params=index)
        self._call("load_collection", client.load_collection, name)
        self._ready.add(dimension)
        return name

    # --- writes and versions ----------------------------------------------------------------------

    def write(self, rows: Iterable[ChunkRow]) -> None:
        """The rows into the chunk table (pgvector's COPY, in the caller's transaction), then their
        vectors and filter fields into Milvus under the ids PostgreSQL gave them. Milvus is not in the
        transaction: a rollback leaves vectors of ids no row has, which searches drop at hydration."""
        rows = list(rows)
        if not rows:
            return
        keys = sorted({(row.version_id, row.document_id) for row in rows})
        before = {chunk for chunk, _, _ in self._ids_of(keys)}
        self.rows.write(rows)
        ids = {(document, ordinal): chunk for chunk, document, ordinal in self._ids_of(keys) if chunk not in before}
        by_dimension: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            vector = np.asarray(row.embedding, dtype=np.float32)
            by_dimension.setdefault(len(vector), []).append(_entity(ids[row.document_id, row.ordinal], row, vector))
        for dimension, entities in by_dimension.items():
            self._upsert(dimension, entities)

    def _ids_of(self, keys: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
        statement = sql.SQL(
            "SELECT id, document_id, ordinal FROM {table} WHERE (kb_version_id, document_id) IN "
            "(SELECT * FROM unnest(%s::bigint[], %s::bigint[]))"
        ).format(table=sql.Identifier(self.table))
        with connection.cursor() as cursor:
            cursor.execute(statement.as_string(cursor.cursor), [[v for v, _ in keys], [d for _, d in keys]])
            return [(int(a), int(b), int(c)) for a, b, c in cursor.fetchall()]

    def delete(self, version_id: int, chunk_ids: list[int]) -> None:
        if not chunk_ids:
            return
        for name in self._collections():
            self._call("delete", self.client.delete, name, ids=list(chunk_ids))

    def build_version(self, version_id: int, *, dimension: int) -> None:
        """The collection of the version's dimension (shared by every version of that dimension)."""
        self.ensure_collection(dimension)

    def switch_version(self, previous_id: int | None, version_id: int) -> None:
        """No-op: a search names its versions (``SearchScope``); every version's vectors stay."""

    def drop_version(self, version_id: int) -> None:
        for name in self._collections():
            self._call("delete", self.client.delete, name, filter=f"version_id == {int(version_id)}")

    def rewrite(self, rows: Iterable[tuple[ChunkRow, int]]) -> int:
        """Write again the vectors and filter fields of (row, chunk id) pairs read from the chunk table:
        a rebuild (a Milvus that lost them, a move from pgvector) or a relabel or ACL change of their
        rows. The count written."""
        batches: dict[int, list[dict[str, Any]]] = {}
        count = 0
        for row, chunk_id in rows:
            vector = np.asarray(row.embedding, dtype=np.float32)
            batch = batches.setdefault(len(vector), [])
            batch.append(_entity(chunk_id, row, vector))
            if len(batch) >= REWRITE_BATCH:
                count += self._upsert(len(vector), batch)
                batch.clear()
        return count + sum(self._upsert(dimension, batch) for dimension, batch in batches.items() if batch)

    def _upsert(self, dimension: int, entities: list[dict[str, Any]]) -> int:
        self._call("upsert", self.client.upsert, self.ensure_collection(dimension), entities)
        return len(entities)

    def _collections(self) -> list[str]:
        names = self._call("list_collections", self.client.list_collections)
        return [name for name in names if name.startswith(f"{self.prefix}_d")]

    # --- search -----------------------------------------------------------------------------------

    def plan(self, scope: SearchScope, filters: SqlFilter) -> int:
        return self.rows.plan(scope, filters)

    def search(
        self,
        scope: SearchScope,
        query_vector: np.ndarray,
        top_k: int,
        filters: SqlFilter,
        plan: int | None = None,
        field_filter: lf.LexicalFilter | None = None,
    ) -> list[VectorHit]:
        """The ``top_k`` nearest in scope passing the filter: a walk of Milvus's graph with ``field_filter``,
        or below the exact-scan limit PostgreSQL's exact scan with ``filters``, the same filter as SQL.
        ``filters`` without ``field_filter`` is refused at any size, so that a filter's support does not
        depend on how many rows it keeps."""
        if filters and field_filter is None:
            raise VectorIndexError(
                "vector_filter_unsupported",
                "this filter has no exact Milvus expression (metadata ranges, exists and string matches): "
                "Milvus searches only filters it can apply exactly",
            )
        matching = plan if plan is not None else self.plan(scope, filters)
        if matching == 0:
            return []
        if matching <= self.rows.exact_limit(scope):
            return self.rows.exact_search(scope, query_vector, top_k, filters)
        return self.walk(scope, query_vector, top_k, field_filter)

    def walk(
        self, scope: SearchScope, query_vector: np.ndarray, top_k: int, field_filter: lf.LexicalFilter | None
    ) -> list[VectorHit]:
        """Milvus's own answer, whatever the scope's size: its graph walked with the filter inside it."""
        name = self.ensure_collection(scope.embedding_dim)
        expression = _scope_expression(scope)
        if field_filter is not None:
            expression = f"({expression}) and ({milvus_expression(field_filter)})"
        vector = np.asarray(query_vector, dtype=np.float32).tolist()
        found = self._call(
            "search", self.client.search, name, data=[vector], filter=expression, limit=top_k,
            output_fields=["content_hash"], anns_field="embedding",
            search_params={"metric_type": "COSINE", "params": {"ef": max(MIN_EF, 2 * top_k)}},
        )  # fmt: skip
        hits = [
            VectorHit(int(hit["id"]), float(hit["distance"]), hit["entity"].get("content_hash")) for hit in found[0]
        ]
        hits.sort(key=lambda hit: -hit.score)
        return hits

    def similarities(self, scope: SearchScope, query_vector: np.ndarray, chunk_ids: list[int]) -> list[VectorHit]:
        """Read by id from the chunk rows, which hold the same full-precision vectors: a lookup by key,
        which needs no graph and no round trip to Milvus (pgvector's ``similarities``)."""
        return self.rows.similarities(scope, query_vector, chunk_ids)


def _entity(chunk_id: int, row: ChunkRow, vector: np.ndarray) -> dict[str, Any]:
    fields = lf.filter_fields(row.doc_type, row.created_at, row.tags, row.metadata, row.acl)
    terms = [term for term in fields.terms if len(term.encode()) <= MAX_TERM_BYTES][:MAX_TERMS]
    return {
        "id": chunk_id, "tenant_id": row.tenant_id, "version_id": row.version_id, "document_id": row.document_id,
        "created_at_us": fields.created_at_us, "content_hash": row.content_hash, "terms": terms,
        "embedding": vector.tolist(),
    }  # fmt: skip


def _scope_expression(scope: SearchScope) -> str:
    versions = ", ".join(str(int(version)) for version in scope.version_ids)
    return f"tenant_id == {int(scope.tenant_id)} and version_id in [{versions}]"


def milvus_expression(node: lf.LexicalFilter) -> str:
    """A filter tree as a Milvus boolean expression over the entity's ``terms``, ``document_id`` and
    ``created_at_us``, with the keyword index's semantics (an empty ``Terms`` or ``DocIds`` matches none)."""
    if isinstance(node, lf.Terms):
        if not node.values:
            return "false"
        return f"array_contains_any(terms, [{', '.join(_string_literal(value) for value in node.values)}])"
    if isinstance(node, lf.DocIds):
        return f"document_id in [{', '.join(str(int(i)) for i in node.ids)}]" if node.ids else "false"
    if isinstance(node, lf.CreatedRange):
        bounds = []
        if node.lower_us is not None:
            bounds.append(f"created_at_us {'>=' if node.include_lower else '>'} {int(node.lower_us)}")
        if node.upper_us is not None:
            bounds.append(f"created_at_us {'<=' if node.include_upper else '<'} {int(node.upper_us)}")
        return " and ".join(bounds) or "true"
    if isinstance(node, lf.And):
        return " and ".join(f"({milvus_expression(part)})" for part in node.parts) or "true"
    if isinstance(node, lf.Or):
        return " or ".join(f"({milvus_expression(part)})" for part in node.parts) or "false"
    return f"not ({milvus_expression(node.part)})"


def _string_literal(value: str) -> str:
    """A Milvus string literal: double-quoted, backslashes and quotes escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped.replace(chr(9), chr(92) + "t")}"'
