"""Dense search in PostgreSQL + pgvector over a chunk table whose name the caller gives.

The table needs ``id``, ``tenant_id``, ``kb_version_id``, ``embedding_dim``, ``embedding`` (a
``vector`` of any dimension) and ``content_hash``; one partial HNSW index per dimension on
``embedding::halfvec(dim)`` (:meth:`PgVectorIndex.ensure_index`; :meth:`PgVectorIndex.rebuild_index` gives it
new build parameters online) lets KBs with different models share it.
The index stores half-precision copies (half the size and build memory of a ``vector`` index, same
recall@10: docs/BENCHMARKS.md, "Scale to 1M chunks"); the rows keep full precision, so an exact scan
stays exact and every score is the full-precision cosine.

Filters arrive as SQL over the table's columns (:class:`engines.base.SqlFilter`, parameterized by the
domain). HNSW with ``hnsw.iterative_scan = relaxed_order`` (set with each graph query) keeps walking
the graph until enough rows pass them; when few rows match (:func:`exact_scan_limit`: fewer than
about the square root of the index's size), an exact scan over those rows is both faster and exact.
The engine decides, and steers the planner to its choice either way. How it sizes the filter (a
count, or the planner's estimate), the iterative scan's order and budget and the graph's m and
ef_construction are constructor options defaulting to their settings (``VECTOR_FILTER_SIZING``,
``HNSW_ITERATIVE_SCAN``, ``HNSW_MAX_SCAN_TUPLES``, ``HNSW_M``, ``HNSW_EF_CONSTRUCTION``), so
bench/filtered_scale.py can switch them; :meth:`PgVectorIndex.set_column_storage` gives the vector
column the storage ``VECTOR_COLUMN_STORAGE`` names (``knowledge.stores`` applies it after each migrate).
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

import numpy as np
from cachetools import TTLCache, cached
from django.conf import settings
from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from pgvector.psycopg import register_vector
from psycopg import Connection, sql
from psycopg.types.json import Jsonb

from engines.base import ChunkRow, SearchScope, SqlFilter, VectorHit, VectorIndex
from engines.chunk_partitions import is_partitioned, partitions
from engines.database import read_connection
from engines.hnsw_parameters import (
    EF_SEARCH_LIMIT,
    BuildParameters,
    build_parameters_for,
    ef_search_for,
    needs_rebuild,
)
from engines.lexical_filter import LexicalFilter
from engines.principal_graphs import graphs_for, split

MAX_HNSW_DIMENSIONS = 4000  # pgvector's limit for an HNSW index on `halfvec`
# VECTOR_EXACT_SCAN_THRESHOLD is the break-even at this many rows in the HNSW index (see exact_scan_limit).
EXACT_SCAN_REFERENCE_ROWS = 100_000
INDEX_ROWS_TTL_S = 60
# pg_attribute.attstorage of each storage name ALTER COLUMN ... SET STORAGE takes.
STORAGE_CODES = {"plain": "p", "external": "e", "main": "m", "extended": "x"}

# Connections whose psycopg adapters know the `vector` type (weak: closed connections drop out).
_VECTOR_REGISTERED: weakref.WeakSet[Connection[Any]] = weakref.WeakSet()


def register_vector_type(database: BaseDatabaseWrapper | None = None) -> None:
    """Teach this connection's psycopg the ``vector`` type (the primary's, or ``database``'s).
    Registering costs four catalog queries, so it happens once per connection; cursors copy the registry
    when created, so call it first."""
    database = connection if database is None else database
    database.ensure_connection()
    if database.connection not in _VECTOR_REGISTERED:
        register_vector(database.connection)
        _VECTOR_REGISTERED.add(database.connection)


def hnsw_index_name(dimension: int) -> str:
    return f"chunk_embedding_hnsw_{dimension}"


def exact_scan_limit(threshold: int, index_rows: int) -> int:
    """Up to how many matching rows a search scans them exactly rather than walking a graph of
    ``index_rows``: ``threshold`` up to EXACT_SCAN_REFERENCE_ROWS, then growing with the square root of
    the graph. An exact scan costs the same per matching row at any size; the iterative walk visits
    about depth / selectivity = depth x index rows / matching rows (the index holds every tenant's
    rows: the scope is a filter too); the two cost the same where the matching rows grow with the
    square root of the index (measured at 100k, 300k and 1M chunks: docs/BENCHMARKS.md, "Scale")."""
    return max(threshold, math.isqrt(threshold * threshold * index_rows // EXACT_SCAN_REFERENCE_ROWS))


# The chunk table's columns a write fills, with their types (a binary COPY needs them).
_COPY_COLUMNS = [
    ("document_id", "int8"),
    ("kb_version_id", "int8"),
    ("tenant_id", "int8"),
    ("knowledge_base_id", "int8"),
    ("ordinal", "int4"),
    ("content", "text"),
    ("content_hash", "varchar"),
    ("token_count", "int4"),
    ("embedding_dim", "int2"),
    ("embedding", "vector"),
    ("doc_type", "varchar"),
    ("created_at", "timestamptz"),
    ("tags", "varchar[]"),
    ("metadata", "jsonb"),
    ("acl", "varchar[]"),
    ("parent_id", "int8"),
]


class PgVectorIndex(VectorIndex[int]):
    """The plan is the number of rows in scope (up to one past the exact-scan limit)."""

    name = "pgvector"

    def __init__(
        self,
        table: str,
        *,
        exact_scan_threshold: int | None = None,
        ef_search: int | None = None,
        iterative_scan: str | None = None,
        max_scan_tuples: int | None = None,
        filter_sizing: str | None = None,
        m: int | None = None,
        ef_construction: int | None = None,
    ):
        self.table = table
        self.exact_scan_threshold = (
            settings.VECTOR_EXACT_SCAN_THRESHOLD if exact_scan_threshold is None else exact_scan_threshold
        )
        # None: chosen per search from the index's rows and the depth (engines.hnsw_parameters)
        self.ef_search: int | None = settings.HNSW_EF_SEARCH if ef_search is None else ef_search
        self.iterative_scan = settings.HNSW_ITERATIVE_SCAN if iterative_scan is None else iterative_scan
        self.max_scan_tuples = settings.HNSW_MAX_SCAN_TUPLES if max_scan_tuples is None else max_scan_tuples
        self.filter_sizing = settings.VECTOR_FILTER_SIZING if filter_sizing is None else filter_sizing
        # None: chosen at each build from the rows it indexes (engines.hnsw_parameters)
        self.m: int | None = settings.HNSW_M if m is None else m
        self.ef_construction: int | None = settings.HNSW_EF_CONSTRUCTION if ef_construction is None else ef_construction

    # --- writes and versions ------------------------------------------------------------------------

    def write(self, rows: Iterable[ChunkRow]) -> None:
        """The rows into the chunk table with one binary COPY, PostgreSQL's fastest way in (ORM inserts
        are many times slower), in the caller's transaction; the table gives them their ids."""
        statement = sql.SQL("COPY {table} ({columns}) FROM STDIN WITH (FORMAT BINARY)").format(
            table=sql.Identifier(self.table),
            columns=sql.SQL(", ").join(sql.Identifier(name) for name, _ in _COPY_COLUMNS),
        )
        register_vector_type()
        with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
            copy.set_types([type_name for _, type_name in _COPY_COLUMNS])
            for row in rows:
                copy.write_row((
                    row.document_id, row.version_id, row.tenant_id, row.knowledge_base_id, row.ordinal, row.content,
                    row.content_hash, row.token_count, len(row.embedding), row.embedding, row.doc_type,
                    row.created_at, row.tags, Jsonb(row.metadata), row.acl, row.parent_id,
                ))  # fmt: skip

    def delete(self, version_id: int, chunk_ids: list[int]) -> None:
        """No-op: the vectors are a column of the chunk rows, which the domain deletes (with what depends
        on them) in the same transaction."""

    def build_version(self, version_id: int, *, dimension: int) -> None:
        """The HNSW index of the version's dimension (shared by every version of that dimension)."""
        self.ensure_index(dimension)

    def switch_version(self, previous_id: int | None, version_id: int) -> None:
        """No-op: a search names its versions (``SearchScope``); every version's rows stay indexed."""

    def drop_version(self, version_id: int) -> None:
        """No-op: the version's vectors are columns of its chunk rows, deleted with the version's row."""

    def ensure_index(self, dimension: int) -> None:
        """One partial HNSW cosine index per embedding dimension over half-precision copies of the
        vectors, built the first time it is needed."""
        name = self._index_name(dimension)
        with connection.cursor() as cursor:
            if self._built_with(cursor, name) is not None:
                return
            # CREATE INDEX refuses to run while deferred FK checks of this transaction are pending.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            build = self.build_parameters(dimension)
            cursor.execute(self._create_index(cursor, name, dimension, concurrently=False, build=build))

    def rebuild_index(self, dimension: int) -> bool:
        """Give the dimension's HNSW index this engine's m and ef_construction (:meth:`build_parameters`),
        online: the new graph is built beside the old one without blocking
        writes (CREATE INDEX CONCURRENTLY, so not inside a transaction), then takes its name in one short
        transaction; searches use the old graph until then. False when the index was built with them."""
        name = self._index_name(dimension)
        building = f"{name}_rebuild"
        with connection.cursor() as cursor:
            build = self.build_parameters(dimension)
            if self._built_with(cursor, name) == tuple(build):
                return False
            if is_partitioned(self.table):
                self._rebuild_partitioned(cursor, name, building, dimension, build)
                return True
            # a rebuild that failed half-way leaves an invalid index under the building name
            cursor.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(building)))
            cursor.execute(self._create_index(cursor, building, dimension, concurrently=True, build=build))
            with transaction.atomic():
                cursor.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
                cursor.execute(
                    sql.SQL("ALTER INDEX {} RENAME TO {}").format(sql.Identifier(building), sql.Identifier(name))
                )
        return True

    def _rebuild_partitioned(
        self, cursor: CursorWrapper, name: str, building: str, dimension: int, build: BuildParameters
    ) -> None:
        """A partitioned table's rebuild: CONCURRENTLY is not allowed on its parent, so the new parent
        index is made ON ONLY the parent (invalid until complete), each partition's graph is built
        CONCURRENTLY and attached to it, then the new index takes the old one's name (and each
        partition's graph a name of its partition) in one short transaction."""
        cursor.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(building)).as_string(cursor.cursor))
        cursor.execute(self._create_index(cursor, building, dimension, concurrently=False, build=build, only=True))
        children = []
        for partition in partitions(self.table):
            cursor.execute("SELECT to_regclass(%s)::oid", [partition.name])
            child = f"{building}_{cursor.fetchone()[0]}"
            drop = sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(child))
            cursor.execute(drop.as_string(cursor.cursor))
            cursor.execute(
                self._create_index(cursor, child, dimension, concurrently=True, build=build, table=partition.name)
            )
            attach = sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(
                sql.Identifier(building), sql.Identifier(child)
            )
            cursor.execute(attach.as_string(cursor.cursor))
            children.append(child)
        with transaction.atomic():
            cursor.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)).as_string(cursor.cursor))
            renames = [(building, name)] + [(child, name + child.removeprefix(building)) for child in children]
            for old, new in renames:
                rename = sql.SQL("ALTER INDEX {} RENAME TO {}").format(sql.Identifier(old), sql.Identifier(new))
                cursor.execute(rename.as_string(cursor.cursor))

    def build_parameters(self, dimension: int, rows: int | None = None) -> BuildParameters:
        """m and ef_construction of a build of the dimension's index now: the settings', or where unset
        chosen from the rows it would index (``rows``, else counted; ef_construction at least 2 x m, as
        pgvector requires)."""
        if self.m is not None and self.ef_construction is not None:
            return BuildParameters(self.m, self.ef_construction)
        chosen = build_parameters_for(self._rows_of_dimension(dimension) if rows is None else rows)
        m = chosen.m if self.m is None else self.m
        ef_construction = chosen.ef_construction if self.ef_construction is None else self.ef_construction
        return BuildParameters(m, max(ef_construction, 2 * m))

    def built_with(self, dimension: int) -> tuple[int | None, int | None] | None:
        """The (m, ef_construction) the dimension's index was built with; None when it has none."""
        with connection.cursor() as cursor:
            return self._built_with(cursor, self._index_name(dimension))

    def rebuild_advice(self, dimension: int) -> RebuildAdvice | None:
        """Why the dimension's index should be rebuilt (``manage.py rebuild_vector_index``): its graph is
        smaller than a build over its rows now would make, so recall falls short at any ef_search. None
        when it is as large (or larger, or made by hand, or absent). Reads the index's row count as
        PostgreSQL last took it (no count: the console asks on each page)."""
        built = self.built_with(dimension)
        if built is None:
            return None
        rows = _rows_in_index(dimension, None, self.table)
        wanted = self.build_parameters(dimension, rows)
        return RebuildAdvice(dimension, rows, built, wanted) if needs_rebuild(built, wanted) else None

    def _rows_of_dimension(self, dimension: int) -> int:
        """The table's rows of one dimension: the rows a build of its index walks."""
        statement = sql.SQL("SELECT count(*) FROM {table} WHERE embedding_dim = %s").format(
            table=sql.Identifier(self.table)
        )
        with connection.cursor() as cursor:
            cursor.execute(statement.as_string(cursor.cursor), [dimension])
            return cast(int, cursor.fetchone()[0])

    def search_list_size(
        self, dimension: int, top_k: int, tenant_id: int | None = None, graph_rows: int | None = None
    ) -> int:
        """``hnsw.ef_search`` of a walk to ``top_k`` rows: the larger of the setting and twice the depth,
        or (unset) chosen from the rows of the graph it walks (``graph_rows``: a reader graph's; else the
        dimension's graph, on a partitioned table the graph of the tenant's partition) and the depth."""
        if self.ef_search is not None:
            return min(max(self.ef_search, 2 * top_k), EF_SEARCH_LIMIT)
        rows = _rows_in_index(dimension, tenant_id, self.table) if graph_rows is None else graph_rows
        return ef_search_for(rows, top_k)

    @staticmethod
    def _index_name(dimension: int) -> str:
        if not 0 < dimension <= MAX_HNSW_DIMENSIONS:
            raise ValueError(f"embedding dimension {dimension} is outside 1..{MAX_HNSW_DIMENSIONS}")
        return hnsw_index_name(dimension)

    def _built_with(self, cursor: CursorWrapper, name: str) -> tuple[int | None, int | None] | None:
        """The (m, ef_construction) the index was built with (None for one its options do not name: an
        index made by hand), or None when there is no index."""
        cursor.execute(
            "SELECT c.reloptions FROM pg_indexes i JOIN pg_class c ON c.relname = i.indexname "
            "WHERE i.tablename = %s AND i.indexname = %s",
            [self.table, name],
        )
        row = cursor.fetchone()
        if row is None:
            return None
        options = dict(option.split("=", 1) for option in row[0] or [])
        m, ef_construction = (int(options[key]) if key in options else None for key in ("m", "ef_construction"))
        return m, ef_construction

    def _create_index(
        self,
        cursor: CursorWrapper,
        name: str,
        dimension: int,
        *,
        concurrently: bool,
        build: BuildParameters,
        only: bool = False,
        table: str | None = None,
    ) -> str:
        """The index on the table (or one of its partitions: ``table``; ``only``: a partitioned table's
        own index, without its partitions')."""
        statement = sql.SQL(
            "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {only} {table} USING hnsw "
            "((embedding::halfvec({dim})) halfvec_cosine_ops) "
            "WITH (m = {m}, ef_construction = {ef_construction}) WHERE embedding_dim = {dim}"
        ).format(
            concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""),
            name=sql.Identifier(name),
            only=sql.SQL("ONLY" if only else ""),
            table=sql.Identifier(table or self.table),
            dim=sql.Literal(dimension),
            m=sql.Literal(build.m),
            ef_construction=sql.Literal(build.ef_construction),
        )
        return statement.as_string(cursor.cursor)

    def column_storage(self) -> str:
        """The vector column's storage as ``pg_attribute`` has it (a name of :data:`STORAGE_CODES`)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
                [self.table],
            )
            code = cursor.fetchone()[0]
        return next(name for name, value in STORAGE_CODES.items() if value == code)

    def set_column_storage(self, storage: str) -> bool:
        """Give the vector column this storage if it has another (a catalog change, no rewrite: rows
        already written keep theirs until the table is rewritten). Whether it changed."""
        if storage not in STORAGE_CODES:
            raise ValueError(f"storage must be one of {', '.join(STORAGE_CODES)}, not {storage!r}")
        if self.column_storage() == storage:
            return False
        statement = sql.SQL("ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE {storage}").format(
            table=sql.Identifier(self.table), storage=sql.SQL(storage.upper())
        )
        with connection.cursor() as cursor:
            cursor.execute(statement.as_string(cursor.cursor))
        return True

    def plan(self, scope: SearchScope, filters: SqlFilter) -> int:
        """How many rows are in scope: counted up to one past the exact-scan limit, or (``filter_sizing``
        "estimate") the planner's estimate of them, which reads no row but is only as good as the
        statistics. A wrong estimate costs time, not rows: a walk that finds too few falls back to exact."""
        return self._size(scope, filters, estimate=self.filter_sizing == "estimate")

    def _size(self, scope: SearchScope, filters: SqlFilter, *, estimate: bool) -> int:
        where, params = self._where(scope, filters)
        limit = self.exact_limit(scope) + 1
        with read_connection().cursor() as cursor:
            if estimate:
                statement = sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {where}").format(
                    table=sql.Identifier(self.table), where=where
                )
                cursor.execute(statement.as_string(cursor.cursor), params)
                # The planner never estimates fewer than one row, so an estimate never skips a search.
                return max(1, min(int(cursor.fetchone()[0][0]["Plan"]["Plan Rows"]), limit))
            statement = sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT %s) AS scope").format(
                table=sql.Identifier(self.table), where=where
            )
            cursor.execute(statement.as_string(cursor.cursor), [*params, limit])
            return cast(int, cursor.fetchone()[0])

    def exact_limit(self, scope: SearchScope) -> int:
        """Up to how many matching rows a search of ``scope`` scans them exactly (:func:`exact_scan_limit`)."""
        return exact_scan_limit(
            self.exact_scan_threshold, _rows_in_index(scope.embedding_dim, scope.tenant_id, self.table)
        )

    def search(
        self,
        scope: SearchScope,
        query_vector: np.ndarray,
        top_k: int,
        filters: SqlFilter,
        plan: int | None = None,
        field_filter: LexicalFilter | None = None,  # the same as ``filters``, which this index reads
    ) -> list[VectorHit]:
        matching = plan if plan is not None else self.plan(scope, filters)
        if matching == 0:
            return []
        # A reader graph is smaller than the tenant's: its walk beats an exact scan from its own break-even
        # on, which is below the tenant graph's on a large table.
        graphed = (
            graphs_for(self.table, scope.tenant_id, scope.embedding_dim, filters.principals)
            if matching > self.exact_scan_threshold
            else {}
        )
        if graphed and matching > exact_scan_limit(self.exact_scan_threshold, max(graphed.values())):
            return self._search_reader_graphs(scope, query_vector, top_k, filters, graphed)
        return self._nearest_hits(scope, query_vector, top_k, filters, exact=matching <= self.exact_limit(scope))

    def _search_reader_graphs(
        self, scope: SearchScope, query_vector: np.ndarray, top_k: int, filters: SqlFilter, graphed: dict[str, int]
    ) -> list[VectorHit]:
        """The search as the parts :func:`engines.principal_graphs.split` gives: a graphed principal's
        part walks its graph (the search's rows are over the exact-scan limit of a graph that size; a walk
        that finds too few rows falls back to exact); the rest, sized by the planner's estimate (a count would
        add a round trip after the query embeds; a low estimate costs time, not rows), walks the main
        graph or is scanned exactly."""
        best: dict[int, VectorHit] = {}
        for part, principal in split(filters, list(graphed)):
            exact = principal is None and self._size(scope, part, estimate=True) <= self.exact_limit(scope)
            graph_rows = graphed[principal] if principal is not None else None
            for hit in self._nearest_hits(scope, query_vector, top_k, part, exact=exact, graph_rows=graph_rows):
                best.setdefault(hit.chunk_id, hit)
        return sorted(best.values(), key=lambda hit: -hit.score)[:top_k]

    def exact_search(
        self, scope: SearchScope, query_vector: np.ndarray, top_k: int, filters: SqlFilter
    ) -> list[VectorHit]:
        """The true ``top_k`` by a scan of the rows passing ``filters`` (no graph): what ``search`` does
        below the exact-scan limit, for an index outside the database whose scope is that small."""
        return self._nearest_hits(scope, query_vector, top_k, filters, exact=True)

    def _nearest_hits(
        self,
        scope: SearchScope,
        query_vector: np.ndarray,
        top_k: int,
        filters: SqlFilter,
        *,
        exact: bool,
        graph_rows: int | None = None,  # the rows of the graph the walk takes, when not the main one's
    ) -> list[VectorHit]:
        where, params = self._where(scope, filters)
        vector = np.asarray(query_vector, dtype=np.float32)
        database = read_connection()  # a search's reads: a replica's, or the primary's
        register_vector_type(database)
        # Inside a caller's transaction a savepoint keeps a failing query (a vector of another dimension)
        # from aborting it; in autocommit the one statement string is a transaction of its own.
        guard = transaction.atomic(using=database.alias) if database.in_atomic_block else contextlib.nullcontext()
        with guard, database.cursor() as cursor:
            nearest = self._nearest(cursor, scope.embedding_dim, where, params, vector, top_k, exact)
            ef_search = self.search_list_size(scope.embedding_dim, top_k, scope.tenant_id, graph_rows)
            rows = self._run(cursor, *nearest, exact=exact, ef_search=ef_search, database=database)
            if not exact and len(rows) < top_k:
                # The graph walk hit its scan budget before finding enough rows; be exact instead.
                nearest = self._nearest(cursor, scope.embedding_dim, where, params, vector, top_k, True)
                rows = self._run(cursor, *nearest, exact=True, ef_search=ef_search, database=database)
        # relaxed_order may return rows slightly out of order.
        rows.sort(key=lambda row: row[1])
        return [VectorHit(chunk_id, 1.0 - float(dist), content_hash) for chunk_id, dist, content_hash in rows]

    def similarities(self, scope: SearchScope, query_vector: np.ndarray, chunk_ids: list[int]) -> list[VectorHit]:
        """One read by primary key, the full-precision cosine as ``search`` gives it (no index walk)."""
        if not chunk_ids:
            return []
        where, params = self._where(scope, SqlFilter())
        statement = sql.SQL(
            "SELECT id, (embedding::vector({dim})) <=> %s AS distance, content_hash FROM {table} "
            "WHERE id = ANY(%s) AND {where}"
        ).format(dim=sql.Literal(scope.embedding_dim), table=sql.Identifier(self.table), where=where)
        database = read_connection()
        register_vector_type(database)
        guard = transaction.atomic(using=database.alias) if database.in_atomic_block else contextlib.nullcontext()
        arguments: list[Any] = [np.asarray(query_vector, dtype=np.float32), list(chunk_ids), *params]
        with guard, database.cursor() as cursor:
            cursor.execute(statement.as_string(cursor.cursor), arguments)
            rows = cursor.fetchall()
        return [VectorHit(chunk_id, 1.0 - float(dist), content_hash) for chunk_id, dist, content_hash in rows]

    def _nearest(
        self,
        cursor: CursorWrapper,
        dim: int,
        where: sql.Composable,
        params: list[Any],
        vector: np.ndarray,
        top_k: int,
        exact: bool,
    ) -> tuple[str, list[Any]]:
        """The nearest-rows query and its arguments. Both paths return the full-precision distance; the
        graph walk orders by the half-precision one, the expression of the per-dimension HNSW index."""
        order = sql.SQL("distance") if exact else sql.SQL("(embedding::halfvec({dim})) <=> %s::halfvec({dim})")
        statement = sql.SQL(
            "SELECT id, (embedding::vector({dim})) <=> %s AS distance, content_hash FROM {table} "
            "WHERE {where} ORDER BY {order} LIMIT %s"
        ).format(
            order=order.format(dim=sql.Literal(dim)),
            dim=sql.Literal(dim),
            table=sql.Identifier(self.table),
            where=where,
        )
        arguments = [vector, *params, *([] if exact else [vector]), top_k]
        return statement.as_string(cursor.cursor), arguments

    @staticmethod
    def _where(scope: SearchScope, filters: SqlFilter) -> tuple[sql.Composable, list[Any]]:
        # bigint, as the column: a literal's int4 would be a cross-type comparison, which the (tenant_id, acl)
        # GIN index does not take, so an ACL check would read every tenant's rows its principals name.
        where: sql.Composable = sql.SQL("tenant_id = %s::bigint AND kb_version_id = ANY(%s) AND embedding_dim = %s")
        params: list[Any] = [scope.tenant_id, list(scope.version_ids), scope.embedding_dim]
        if filters:
            where = sql.SQL("{} AND ({})").format(where, sql.SQL(filters.sql))
            params += filters.params
        return where, params

    def _run(
        self,
        cursor: CursorWrapper,
        query: str,
        arguments: list[Any],
        *,
        exact: bool,
        ef_search: int,
        database: BaseDatabaseWrapper,
    ) -> list[tuple[Any, ...]]:
        """The planner settings and the query in one round trip. Several statements in one string run as
        one implicit transaction, so settings made with set_config(..., true) hold for the query and end
        with it; inside a caller's transaction a third statement puts them back. Needs Django's default
        client-side parameter binding (the server-side kind takes one statement at a time)."""
        # The exact scan: no index scan (HNSW is only ever one; bitmap scans on the btree/GIN filter
        # indexes stay allowed). The walk: no sort, so the ordered HNSW scan is the plan; left free,
        # PostgreSQL may sort every filtered row instead, many times slower.
        planner = (
            "SELECT set_config('enable_indexscan', %s, true), set_config('enable_sort', %s, true), "
            "set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true), "
            "set_config('hnsw.max_scan_tuples', %s, true)"
        )
        hnsw = [
            str(ef_search),
            self.iterative_scan,
            str(self.max_scan_tuples),
        ]
        steer = ["off", "on"] if exact else ["on", "off"]
        statements, values = [planner, query], [*steer, *hnsw, *arguments]
        if database.in_atomic_block:
            statements.append(planner)
            values += ["on", "on", *hnsw]
        cursor.execute("; ".join(statements), values)
        cursor.nextset()
        return cast(list[tuple[Any, ...]], cursor.fetchall())


class RebuildAdvice(NamedTuple):
    """An index whose graph is smaller than its rows call for (:meth:`PgVectorIndex.rebuild_advice`)."""

    dimension: int
    rows: int
    built: tuple[int | None, int | None]
    wanted: BuildParameters

    def __str__(self) -> str:
        m, ef_construction = self.built
        return (
            f"the HNSW index of dimension {self.dimension} was built with m {m}, ef_construction "
            f"{ef_construction}; at {self.rows:,} rows recall@10 needs m {self.wanted.m}, ef_construction "
            f"{self.wanted.ef_construction}: run manage.py rebuild_vector_index (online)"
        )


@cached(TTLCache(maxsize=1_000, ttl=INDEX_ROWS_TTL_S), key=lambda *args: args, lock=threading.Lock())
def _rows_in_index(dimension: int, tenant_id: int | None = None, table: str = "knowledge_chunk") -> int:
    """The rows of a dimension's HNSW index as PostgreSQL last counted them (``reltuples``: updated by
    CREATE INDEX, VACUUM and ANALYZE; 0 before), read at most every ``INDEX_ROWS_TTL_S`` per process.
    On a partitioned table, the rows of the graph of the partition holding ``tenant_id``'s rows (no
    tenant: of every partition's graph)."""
    with read_connection().cursor() as cursor:
        cursor.execute(
            sql.SQL(
                "SELECT CASE WHEN c.relkind = 'I' AND %s::bigint IS NULL THEN (SELECT sum(p.reltuples) "
                "FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid WHERE i.inhparent = c.oid) "
                "WHEN c.relkind = 'I' THEN (SELECT p.reltuples FROM pg_inherits i "
                "JOIN pg_index x ON x.indexrelid = i.inhrelid JOIN pg_class p ON p.oid = i.inhrelid "
                "WHERE i.inhparent = c.oid AND x.indrelid = (SELECT tableoid FROM {table} WHERE tenant_id = %s LIMIT 1)) "
                "ELSE c.reltuples END FROM pg_class c WHERE c.oid = to_regclass(%s)"
            )
            .format(table=sql.Identifier(table))
            .as_string(cursor.cursor),
            [tenant_id, tenant_id, hnsw_index_name(dimension)],
        )
        row = cursor.fetchone()
    return max(int(row[0]), 0) if row and row[0] is not None else 0
