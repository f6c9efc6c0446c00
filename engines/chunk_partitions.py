"""LIST partitions by tenant of the chunk table, so a tenant's vector search walks only its partition's
HNSW graph and a tenant's rows can be detached (dropped or moved) without rewriting the others'.

Opt-in and run by an operator (``manage.py partition_chunks``); the Django model does not change.
:func:`convert` turns the table in place into the DEFAULT partition of a new partitioned table of its
name: a unique index on (id, tenant_id) is built beside the old key first (CONCURRENTLY, online), then
one short transaction renames, attaches and matches every index, key and check to the parent's, so no
row is copied and no index rebuilt under the lock. PostgreSQL's rules shape it:

- a partitioned table's primary key must hold the partition key: it becomes (id, tenant_id);
- so a foreign key *to* the table cannot reference ``id`` alone: the graph's mention and passage
  relation keys to a chunk lose their database check (Django's ORM still cascades every delete, and
  no code deletes chunks in raw SQL);
- an attached table may not have an identity column of its own: the parent's identity continues the
  old sequence.

:func:`own` moves a tenant out of the DEFAULT partition into one of its own (its rows copied and its
indexes built before the attach); :func:`detach` takes a tenant's partition out of the table;
:func:`merge` is the way back to one plain table.
"""

from __future__ import annotations

import re
import time
from typing import NamedTuple, cast

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from psycopg import sql

DEFAULT_SUFFIX = "_default"
# How long a step waits for its lock before giving up (a retry later does no harm): an exclusive lock
# waiting behind a long query would hold up every query queued behind it meanwhile.
LOCK_TIMEOUT_S = 10.0
# Own partitions holding more rows than this are merged back without the HNSW graphs: a row copied into a
# graph is one insert into it, under the merge's exclusive lock, where a build after the lock takes a
# fraction of the time and blocks no query (BENCHMARKS.md, "Tenant partitions at 1M").
MERGE_REBUILD_ROWS = 10_000
_VALUES = re.compile(r"FOR VALUES IN \((.*)\)")


class Partition(NamedTuple):
    name: str
    tenant_ids: tuple[int, ...]  # empty: the DEFAULT partition
    rows: int  # as PostgreSQL last counted them


class Merged(NamedTuple):
    locked_s: float
    graphs: tuple[str, ...]  # the HNSW indexes dropped to copy the rows, to build again (:func:`build_graphs`)


class PartitionError(Exception):
    """The table is not in the state the step needs (said in the message)."""


def default_partition(table: str) -> str:
    return f"{table}{DEFAULT_SUFFIX}"


def tenant_partition(table: str, tenant_id: int) -> str:
    return f"{table}_t{tenant_id}"


def is_partitioned(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    return bool(row and row[0])


def partitions(table: str) -> list[Partition]:
    """The table's partitions, the DEFAULT one first; empty when it is not partitioned."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname",
            [table],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound, tuples in rows:
        values = _VALUES.search(bound or "")
        tenant_ids = tuple(int(v.strip(" '")) for v in values.group(1).split(",")) if values else ()
        found.append(Partition(name, tenant_ids, max(int(tuples), 0)))
    return sorted(found, key=lambda partition: (bool(partition.tenant_ids), partition.name))


def _prepare(cursor: CursorWrapper, lock_timeout_s: float) -> None:
    """A step's transaction: no ALTER TABLE runs with deferred key checks pending, and no lock is waited
    for longer than ``lock_timeout_s`` (PostgreSQL's lock_timeout, for this transaction only)."""
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{round(lock_timeout_s * 1000)}ms"])


def _execute(cursor: CursorWrapper, statement: sql.Composable, params: list[int] | None = None) -> None:
    cursor.execute(statement.as_string(cursor.cursor), params)


def convert(table: str, lock_timeout_s: float = LOCK_TIMEOUT_S) -> float:
    """Make ``table`` partitioned by LIST (tenant_id), its rows the DEFAULT partition. Returns the
    seconds the table was locked (ACCESS EXCLUSIVE: catalog changes only, no row is read)."""
    if is_partitioned(table):
        raise PartitionError(f"{table} is partitioned already")
    default = default_partition(table)
    unique = f"{table}_id_tenant"
    online = not connection.in_atomic_block  # CONCURRENTLY needs its own transactions
    with connection.cursor() as cursor:
        concurrently = sql.SQL("CONCURRENTLY" if online else "")
        if not online:
            # inside a transaction that wrote chunks, their deferred key checks are pending trigger events,
            # and PostgreSQL builds no index on a table that has them: run the checks now
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        # a build that failed half-way leaves an invalid index under the name
        _execute(cursor, sql.SQL("DROP INDEX {} IF EXISTS {}").format(concurrently, sql.Identifier(unique)))
        _execute(
            cursor,
            sql.SQL("CREATE UNIQUE INDEX {} {} ON {} (id, tenant_id)").format(
                concurrently, sql.Identifier(unique), sql.Identifier(table)
            ),
        )
        with transaction.atomic():
            _prepare(cursor, lock_timeout_s)
            _execute(cursor, sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))
            started = time.monotonic()
            _swap_in_partitioned(cursor, table, default, unique)
            locked = time.monotonic() - started
    return locked


def _swap_in_partitioned(cursor: CursorWrapper, table: str, default: str, unique: str) -> None:
    cursor.execute(
        "SELECT conname, conindid::regclass::text FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
        [table],
    )
    primary_key, primary_index = cursor.fetchone()
    cursor.execute(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = current_schema() "
        "AND i.tablename = %s AND i.indexname NOT IN (%s, %s) ORDER BY i.indexname",
        [table, primary_index, unique],
    )
    indexes = cursor.fetchall()
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
        "AND contype = 'f' ORDER BY conname",
        [table],
    )
    references = cursor.fetchall()
    cursor.execute(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE confrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    referenced_by = cursor.fetchall()
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    sequence = cursor.fetchone()[0]
    next_id = _next_id(cursor, table)
    cursor.execute("SELECT attidentity FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'id'", [table])
    identity = cursor.fetchone()[0]

    for referencing, name in referenced_by:
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(sql.SQL(referencing), sql.Identifier(name)),
        )
    _execute(cursor, sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(table), sql.Identifier(default)))
    for name, _ in indexes:
        _execute(
            cursor,
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(sql.Identifier(name), sql.Identifier(f"{name}_d")),
        )
    column = sql.SQL("ALTER TABLE {} ALTER COLUMN id {}").format(
        sql.Identifier(default), sql.SQL("DROP IDENTITY" if identity else "DROP DEFAULT")
    )
    _execute(cursor, column)
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}, ADD CONSTRAINT {} PRIMARY KEY USING INDEX {}").format(
            sql.Identifier(default),
            sql.Identifier(primary_key),
            sql.Identifier(f"{default}_pkey"),
            sql.Identifier(unique),
        ),
    )
    if not identity:  # a serial column: its sequence goes too; the parent's identity continues it
        _execute(cursor, sql.SQL("DROP SEQUENCE {}").format(sql.SQL(sequence)))
    _execute(
        cursor,
        sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE "
            "INCLUDING COMPRESSION INCLUDING COMMENTS) PARTITION BY LIST (tenant_id)"
        ).format(sql.Identifier(table), sql.Identifier(default)),
    )
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {})").format(
            sql.Identifier(table), sql.Literal(next_id)
        ),
    )
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id, tenant_id)").format(
            sql.Identifier(table), sql.Identifier(primary_key)
        ),
    )
    for name, definition in references:
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                sql.Identifier(table), sql.Identifier(name), sql.SQL(definition)
            ),
        )
    for _, definition in indexes:  # each names the table, which is now the partitioned one
        cursor.execute(definition)
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} DEFAULT").format(sql.Identifier(table), sql.Identifier(default)),
    )


def _next_id(cursor: CursorWrapper, table: str) -> int:
    """The id the table's sequence hands out next."""
    cursor.execute(
        "SELECT coalesce(s.last_value + s.increment_by, s.start_value) FROM pg_sequences s "
        "WHERE format('%%I.%%I', s.schemaname, s.sequencename)::regclass = pg_get_serial_sequence(%s, 'id')::regclass",
        [table],
    )
    return cast(int, cursor.fetchone()[0])


def own(table: str, tenant_id: int, lock_timeout_s: float = LOCK_TIMEOUT_S) -> tuple[int, float]:
    """Move a tenant's rows from the DEFAULT partition into a partition of its own. Its rows are copied
    and its indexes built while the DEFAULT partition takes reads but no writes; the attach then checks
    the DEFAULT partition holds none of its rows (a scan under an exclusive lock). Outside a transaction,
    the DEFAULT partition's graphs are then built again without the rows moved out (:func:`rebuild_graphs`).
    Returns the rows moved and the seconds of the whole step."""
    found = partitions(table)
    if not found:
        raise PartitionError(f"{table} is not partitioned: run partition_chunks first")
    if any(tenant_id in partition.tenant_ids for partition in found):
        raise PartitionError(f"tenant {tenant_id} has a partition of its own already")
    default, own_partition = default_partition(table), tenant_partition(table, tenant_id)
    started = time.monotonic()
    with transaction.atomic(), connection.cursor() as cursor:
        _prepare(cursor, lock_timeout_s)
        _execute(cursor, sql.SQL("LOCK TABLE {} IN SHARE MODE").format(sql.Identifier(default)))
        _execute(
            cursor,
            sql.SQL(
                "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE "
                "INCLUDING COMPRESSION)"
            ).format(sql.Identifier(own_partition), sql.Identifier(table)),
        )
        # the attach needs no scan of the new table when a check already states its partition constraint
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (tenant_id IS NOT NULL AND tenant_id = {})").format(
                sql.Identifier(own_partition), sql.Identifier(f"{own_partition}_tenant"), sql.Literal(tenant_id)
            ),
        )
        _execute(
            cursor,
            sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE tenant_id = %s").format(
                sql.Identifier(own_partition), sql.Identifier(default)
            ),
            [tenant_id],
        )
        moved = cursor.rowcount
        _execute(cursor, sql.SQL("DELETE FROM {} WHERE tenant_id = %s").format(sql.Identifier(default)), [tenant_id])
        _build_parent_indexes_on(cursor, table, own_partition)
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(table), sql.Identifier(own_partition), sql.Literal(tenant_id)
            ),
        )
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                sql.Identifier(own_partition), sql.Identifier(f"{own_partition}_tenant")
            ),
        )
    if not connection.in_atomic_block:
        rebuild_graphs(default)
    return moved, time.monotonic() - started


def _graphs(cursor: CursorWrapper, table: str) -> list[str]:
    """The names of the table's HNSW indexes."""
    cursor.execute(
        "SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE x.indrelid = %s::regclass AND a.amname = 'hnsw' ORDER BY 1",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def rebuild_graphs(partition: str) -> None:
    """The table's (or partition's) HNSW graphs without the rows just moved out or deleted, online: pgvector's advice (REINDEX
    CONCURRENTLY, then VACUUM) for a graph that lost many rows, since a vacuum alone repairs the graph
    around every deleted row, which takes longer than a build once they are many."""
    with connection.cursor() as cursor:
        for name in _graphs(cursor, partition):
            _execute(cursor, sql.SQL("REINDEX INDEX CONCURRENTLY {}").format(sql.Identifier(name)))
        _execute(cursor, sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(partition)))


def _build_parent_indexes_on(cursor: CursorWrapper, table: str, partition: str) -> None:
    """Each index of the partitioned table, built on a table about to be attached (the attach then
    matches them instead of building them under its lock); the primary key as a constraint."""
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id, tenant_id)").format(
            sql.Identifier(partition), sql.Identifier(f"{partition}_pkey")
        ),
    )
    cursor.execute(
        "SELECT pg_get_indexdef(x.indexrelid) FROM pg_index x WHERE x.indrelid = %s::regclass AND NOT x.indisprimary",
        [table],
    )
    target = sql.Identifier(partition).as_string(cursor.cursor)
    for (definition,) in cursor.fetchall():
        # "CREATE [UNIQUE] INDEX name ON ONLY schema.table USING ..." -> an unnamed index on the partition
        head, _, rest = cast(str, definition).partition(" USING ")
        unique = "UNIQUE " if head.startswith("CREATE UNIQUE") else ""
        cursor.execute(f"CREATE {unique}INDEX ON {target} USING {rest}")


def detach(table: str, tenant_id: int, lock_timeout_s: float = LOCK_TIMEOUT_S) -> str:
    """Take a tenant's own partition out of the table (a catalog change under a short exclusive lock;
    CONCURRENTLY is not allowed beside a DEFAULT partition). Its rows stay in the returned table,
    no longer searched, to dump or drop."""
    found = [partition for partition in partitions(table) if tenant_id in partition.tenant_ids]
    if not found:
        raise PartitionError(
            f"tenant {tenant_id} has no partition of its own: run partition_chunks --own {tenant_id} first"
        )
    name = found[0].name
    with transaction.atomic(), connection.cursor() as cursor:
        _prepare(cursor, lock_timeout_s)
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(sql.Identifier(table), sql.Identifier(name)),
        )
    return name


def merge(table: str, lock_timeout_s: float = LOCK_TIMEOUT_S) -> Merged:
    """The way back: every partition's rows in one plain table again, the DEFAULT partition becoming it
    (own partitions' rows are copied into it, its key rebuilt on ``id`` alone), under an exclusive lock.
    When the own partitions hold more than MERGE_REBUILD_ROWS rows, the HNSW graphs are dropped before
    the copy (searches scan exactly until :func:`build_graphs` has built them again, after the commit).
    The foreign keys to the table that :func:`convert` dropped are the caller's to add back."""
    found = partitions(table)
    if not found:
        raise PartitionError(f"{table} is not partitioned")
    default = default_partition(table)
    with transaction.atomic(), connection.cursor() as cursor:
        _prepare(cursor, lock_timeout_s)
        _execute(cursor, sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))
        started = time.monotonic()
        graphs: list[str] = []
        if sum(partition.rows for partition in found if partition.tenant_ids) > MERGE_REBUILD_ROWS:
            for graph in _graphs(cursor, table):
                cursor.execute("SELECT pg_get_indexdef(%s::regclass)", [graph])
                graphs.append(cast(str, cursor.fetchone()[0]).replace(" ON ONLY ", " ON ", 1))
                _execute(cursor, sql.SQL("DROP INDEX {}").format(sql.Identifier(graph)))
        for partition in found:
            if partition.tenant_ids:
                name = sql.Identifier(partition.name)
                _execute(cursor, sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(sql.Identifier(table), name))
                _execute(cursor, sql.SQL("INSERT INTO {} SELECT * FROM {}").format(sql.Identifier(table), name))
                _execute(cursor, sql.SQL("DROP TABLE {}").format(name))
        cursor.execute(
            "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_index x ON x.indexrelid = c.oid "
            "WHERE x.indrelid = %s::regclass AND NOT x.indisprimary",
            [default],
        )
        names = cursor.fetchall()  # each index of the DEFAULT partition, and its parent's name
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p' "
            "UNION ALL SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
            [table, default],
        )
        primary_key, default_key = (row[0] for row in cursor.fetchall())
        next_id = _next_id(cursor, table)
        _execute(
            cursor,
            sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(sql.Identifier(table), sql.Identifier(default)),
        )
        _execute(cursor, sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        _execute(cursor, sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(default), sql.Identifier(table)))
        for child, parent in names:
            rename = sql.SQL("ALTER INDEX {} RENAME TO {}").format(sql.Identifier(child), sql.Identifier(parent))
            _execute(cursor, rename)
        cursor.execute("SELECT attidentity FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'id'", [table])
        if cursor.fetchone()[0]:
            _execute(cursor, sql.SQL("ALTER TABLE {} ALTER COLUMN id DROP IDENTITY").format(sql.Identifier(table)))
        _execute(
            cursor,
            sql.SQL(
                "ALTER TABLE {} DROP CONSTRAINT {}, ADD CONSTRAINT {} PRIMARY KEY (id), "
                "ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {})"
            ).format(
                sql.Identifier(table), sql.Identifier(default_key), sql.Identifier(primary_key), sql.Literal(next_id)
            ),
        )
        return Merged(time.monotonic() - started, tuple(graphs))


def build_graphs(definitions: tuple[str, ...]) -> None:
    """The HNSW indexes :func:`merge` dropped, built again from their definitions: CONCURRENTLY (no write
    waits) unless inside a transaction."""
    with connection.cursor() as cursor:
        for definition in definitions:
            if not connection.in_atomic_block:
                definition = definition.replace("CREATE INDEX ", "CREATE INDEX CONCURRENTLY ", 1)
            cursor.execute(definition)


def partition_of(table: str, tenant_id: int) -> str | None:
    """The partition that holds (or would hold) a tenant's rows; None when the table is not partitioned."""
    found = partitions(table)
    if not found:
        return None
    return next((p.name for p in found if tenant_id in p.tenant_ids), found[0].name)
