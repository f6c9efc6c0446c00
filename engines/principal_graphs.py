"""Reader graphs: an HNSW graph of its own for the chunks one principal of one tenant may read.

A search carries its reader's ACL check as a filter (``acl && principals``). When that check keeps a
tenth of a large tenant's chunks, the walk of the tenant's graph visits about ten rows for each one
it keeps, and the search costs 1.65x an unfiltered one (docs/BENCHMARKS.md, "The permission check's
cost"). A partial HNSW index whose predicate is one principal's (``tenant_id = T AND acl && '{p}'``)
holds only those rows, so a walk of it keeps every row it visits. An operator gives such a graph to a
principal whose readers search a large share that is still much smaller than the tenant
(``manage.py reader_graph``); PostgreSQL keeps it current with every write, as any index.

A search whose reader holds principals with graphs runs as several searches whose union is exactly
the filter's rows (:func:`split`): the filter AND ``acl && '{p}'`` for each such principal ``p`` (the
planner proves the partial index's predicate from that clause and walks it), and the filter AND
``acl && others`` AND NOT ``acl && graphed`` for the reader's other principals. Each part is a subset of
the filter, so no part can return a row the filter excludes, whatever the principals say; a chunk
several parts find is kept once, with its score.

The graphs are found in the catalog by their comment (JSON: tenant, principal, dimension), read at most
every ``GRAPHS_TTL_S`` per process; only valid indexes count (a failed concurrent build leaves an
invalid one, which ``drop`` removes).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass

from cachetools import TTLCache, cached
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import sql

from engines.base import SqlFilter
from engines.chunk_partitions import is_partitioned
from engines.database import read_connection
from engines.hnsw_parameters import BuildParameters

PREFIX = "chunk_reader_hnsw"
GRAPHS_TTL_S = 60


@dataclass(frozen=True)
class ReaderGraph:
    tenant_id: int
    principal: str
    dimension: int
    name: str
    rows: int  # as PostgreSQL last counted them (reltuples)
    valid: bool


def graph_name(tenant_id: int, principal: str, dimension: int) -> str:
    """An index name within PostgreSQL's 63 bytes for any principal (its digest, not its text)."""
    digest = hashlib.sha256(principal.encode()).hexdigest()[:16]
    return f"{PREFIX}_{dimension}_{tenant_id}_{digest}"


def create(
    table: str, tenant_id: int, principal: str, dimension: int, build: BuildParameters, *, concurrently: bool = True
) -> ReaderGraph:
    """Build the graph online (CREATE INDEX CONCURRENTLY: writes go on; not inside a transaction; without
    ``concurrently``, in the caller's transaction, holding off writes). The chunk table must not be
    partitioned (give a large tenant its own partition instead)."""
    if is_partitioned(table):
        raise ValueError("the chunk table is partitioned: a reader graph needs the single table")
    name = graph_name(tenant_id, principal, dimension)
    comment = json.dumps({"tenant_id": tenant_id, "principal": principal, "dimension": dimension})
    online = sql.SQL("CONCURRENTLY" if concurrently else "")
    with connection.cursor() as cursor:
        if not concurrently:  # CREATE INDEX refuses to run while deferred FK checks of this transaction are pending
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(
            sql.SQL("DROP INDEX {} IF EXISTS {}").format(online, sql.Identifier(name)).as_string(cursor.cursor)
        )
        statement = sql.SQL(
            "CREATE INDEX {online} {name} ON {table} USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) "
            "WITH (m = {m}, ef_construction = {ef_construction}) "
            "WHERE embedding_dim = {dim} AND tenant_id = {tenant} AND acl && {principals}::varchar[]"
        ).format(
            online=online,
            name=sql.Identifier(name),
            table=sql.Identifier(table),
            dim=sql.Literal(dimension),
            m=sql.Literal(build.m),
            ef_construction=sql.Literal(build.ef_construction),
            tenant=sql.Literal(tenant_id),
            principals=sql.Literal([principal]),
        )
        cursor.execute(statement.as_string(cursor.cursor))
        cursor.execute(
            sql.SQL("COMMENT ON INDEX {} IS {}")
            .format(sql.Identifier(name), sql.Literal(comment))
            .as_string(cursor.cursor)
        )
    _graphed.cache_clear()
    (graph,) = [g for g in listed(table) if g.name == name]
    return graph


def drop(table: str, tenant_id: int, principal: str, dimension: int, *, concurrently: bool = True) -> bool:
    """Drop the graph (online, or in the caller's transaction); whether there was one."""
    name = graph_name(tenant_id, principal, dimension)
    existed = any(graph.name == name for graph in listed(table))
    online = sql.SQL("CONCURRENTLY" if concurrently else "")
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("DROP INDEX {} IF EXISTS {}").format(online, sql.Identifier(name)).as_string(cursor.cursor)
        )
    _graphed.cache_clear()
    return existed


def listed(table: str, database: BaseDatabaseWrapper | None = None) -> list[ReaderGraph]:
    """Every reader graph on the table, valid or not, by tenant, dimension and principal (read on
    ``database``, the primary's by default)."""
    database = database or connection
    with database.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, obj_description(c.oid, 'pg_class'), c.reltuples, x.indisvalid FROM pg_index x "
            "JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = to_regclass(%s) AND c.relname LIKE %s",
            [table, f"{PREFIX}\\_%"],
        )
        rows = cursor.fetchall()
    graphs = []
    for name, comment, reltuples, valid in rows:
        try:
            about = json.loads(comment or "")
            graph = ReaderGraph(
                int(about["tenant_id"]), str(about["principal"]), int(about["dimension"]), name,
                max(int(reltuples), 0), bool(valid),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError):
            continue  # not one of ours (no comment yet: a build under way)
        if graph.name == graph_name(graph.tenant_id, graph.principal, graph.dimension):
            graphs.append(graph)
    return sorted(graphs, key=lambda g: (g.tenant_id, g.dimension, g.principal))


@cached(TTLCache(maxsize=1_000, ttl=GRAPHS_TTL_S), key=lambda *args: args, lock=threading.Lock())
def _graphed(table: str, alias: str) -> dict[tuple[int, int], dict[str, int]]:
    """(tenant, dimension) -> {principal: rows} of the valid graphs, as the search's database has them."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for graph in listed(table, read_connection()):
        if graph.valid:
            out.setdefault((graph.tenant_id, graph.dimension), {})[graph.principal] = graph.rows
    return out


def graphs_for(table: str, tenant_id: int, dimension: int, principals: tuple[str, ...]) -> dict[str, int]:
    """The reader's principals that have a graph in this tenant and dimension, with its rows."""
    if not principals:
        return {}
    held = _graphed(table, read_connection().alias).get((tenant_id, dimension), {})
    return {principal: held[principal] for principal in principals if principal in held}


def split(filters: SqlFilter, graphed: list[str]) -> list[tuple[SqlFilter, str | None]]:
    """The filter as parts whose union is exactly its rows: one per graphed principal (with that
    principal, whose graph walks it), then (None: the main graph) the rows the reader's other principals
    admit and no graphed one does. Those other principals are named in that part, so that PostgreSQL
    finds its rows by them (often few: a count or scan of the filter's rows would read the graphed ones)."""
    where = f"({filters.sql})" if filters else "TRUE"
    parts: list[tuple[SqlFilter, str | None]] = [
        (SqlFilter(f"{where} AND acl && %s::varchar[]", (*filters.params, [principal])), principal)
        for principal in graphed
    ]
    others = [principal for principal in filters.principals if principal not in graphed]
    if others:
        rest = f"{where} AND acl && %s::varchar[] AND NOT (acl && %s::varchar[])"
        parts.append((SqlFilter(rest, (*filters.params, others, list(graphed))), None))
    return parts
