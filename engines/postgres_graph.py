"""The entity graph in PostgreSQL tables whose names the caller gives; k-hop walks by recursive CTE.

Tables (``knowledge.models`` defines them): communities (``level, number, parent``, entity and
chunk id arrays, summary, analyzed summary, embedding), entities (``id, tenant_id, kb_version_id, name, label,
kind, chunk_count``, unique per version and name), mentions (``tenant_id, kb_version_id, entity_id,
chunk_id, count``) and relations (``tenant_id, kb_version_id, source_id, target_id, chunk_id, weight, kind``,
one row per passage and direction). Relations and mentions belong to a passage, so replacing a
document's passages replaces exactly its part of the graph. Every statement is scoped by tenant and
KB version and parameterized.
"""
from __future__ import annotations

from contextlib import nullcontext

from django.db import DatabaseError, connection, transaction
from psycopg import sql

from engines.base import Community, Extraction, GraphNode, GraphScope, GraphStep, GraphStore, GraphStoreError

MAX_NAME_CHARS = 200  # the entity table's name and label columns


class PostgresGraphStore(GraphStore):
    name = "postgres"

    def __init__(self, *, entities: str, mentions: str, relations: str, communities: str, chunks: str):
        self._tables = {
            "communities": sql.Identifier(communities),
            "entities": sql.Identifier(entities),
            "mentions": sql.Identifier(mentions),
            "relations": sql.Identifier(relations),
            "chunks": sql.Identifier(chunks),
        }

    def replace_chunks(
        self, tenant_id: int, version_id: int, removed_chunk_ids: list[int], graphs: dict[int, Extraction]
    ) -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            touched: set[int] = set()
            if removed_chunk_ids:
                touched.update(self._remove(cursor, tenant_id, version_id, removed_chunk_ids))
            if graphs:
                touched.update(self._add(cursor, tenant_id, version_id, graphs))
            if touched:
                self._execute(cursor, _RECOUNT, [tenant_id, version_id, list(touched)])
                self._execute(cursor, _DROP_UNMENTIONED, [tenant_id, version_id, list(touched)])

    def drop_versions(self, tenant_id: int, version_ids: list[int]) -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in (_DROP_COMMUNITIES, _DROP_RELATIONS, _DROP_MENTIONS, _DROP_ENTITIES):
                self._execute(cursor, statement, [tenant_id, version_ids])

    def find_entities(self, scope: GraphScope, names: list[str]) -> list[GraphNode]:
        return self._nodes(_FIND_BY_NAME, [scope.tenant_id, list(scope.version_ids), names])

    def find_similar(self, scope: GraphScope, names: list[str], min_similarity: float) -> list[GraphNode]:
        if not names:
            return []
        tenant, versions = scope.tenant_id, list(scope.version_ids)
        return self._nodes(_FIND_SIMILAR, [names, tenant, versions, min_similarity])

    def entities(self, scope: GraphScope, entity_ids: list[int]) -> list[GraphNode]:
        return self._nodes(_FIND_BY_ID, [scope.tenant_id, list(scope.version_ids), entity_ids])

    def neighbourhood(self, scope: GraphScope, seed_ids: list[int], hops: int, fanout: int) -> list[GraphStep]:
        tenant, versions = scope.tenant_id, list(scope.version_ids)
        rows = self._fetch(_NEIGHBOURHOOD, [tenant, versions, seed_ids, tenant, versions, fanout, hops])
        return [GraphStep(entity_id, hops, float(strength), tuple(path)) for entity_id, hops, strength, path in rows]

    def mentions(self, scope: GraphScope, entity_ids: list[int], per_entity: int) -> list[tuple[int, int, int]]:
        return self._fetch(_MENTIONS, [entity_ids, scope.tenant_id, list(scope.version_ids), per_entity])

    def chunk_total(self, scope: GraphScope) -> int:
        return self._fetch(_CHUNK_TOTAL, [scope.tenant_id, list(scope.version_ids)])[0][0]

    def edges(self, tenant_id: int, version_id: int) -> list[tuple[int, int, float]]:
        return [(a, b, float(weight)) for a, b, weight in self._fetch(_EDGES, [tenant_id, version_id])]

    def replace_communities(self, tenant_id: int, version_id: int, communities: list[Community]) -> None:
        rows = [
            (tenant_id, version_id, c.level, c.number, c.parent, list(c.entity_ids), list(c.key_entities),
             c.summary, c.analyzed, list(c.chunk_ids), list(c.embedding))
            for c in communities
        ]  # fmt: skip
        with transaction.atomic(), connection.cursor() as cursor:
            self._execute(cursor, _DROP_COMMUNITIES, [tenant_id, [version_id]])
            if rows:
                cursor.executemany(_INSERT_COMMUNITY.format(**self._tables).as_string(cursor.cursor), rows)

    def communities(self, scope: GraphScope, level: int | None = None) -> list[Community]:
        rows = self._fetch(_COMMUNITIES, [scope.tenant_id, list(scope.version_ids), level, level])
        return [
            Community(version, lvl, number, parent, tuple(entities), tuple(keys), summary, analyzed, tuple(chunks),
                      tuple(embedding))
            for version, lvl, number, parent, entities, keys, summary, analyzed, chunks, embedding in rows
        ]  # fmt: skip

    def ping(self) -> str:
        self._fetch(_PING, [])
        return "postgres graph tables"

    # --- writing ---------------------------------------------------------------------------------

    def _remove(self, cursor, tenant_id: int, version_id: int, chunk_ids: list[int]) -> list[int]:
        """Delete the chunks' relations and mentions; the ids of the entities they mentioned."""
        self._execute(cursor, _DELETE_RELATIONS, [tenant_id, version_id, chunk_ids])
        self._execute(cursor, _DELETE_MENTIONS, [tenant_id, version_id, chunk_ids])
        return [row[0] for row in cursor.fetchall()]

    def _add(self, cursor, tenant_id: int, version_id: int, graphs: dict[int, Extraction]) -> list[int]:
        """Upsert the entities by name, then insert mentions and both directions of each relation."""
        labels: dict[str, tuple[str, str]] = {}
        for extraction in graphs.values():
            for entity in extraction.entities:
                labels.setdefault(entity.name[:MAX_NAME_CHARS], (entity.label[:MAX_NAME_CHARS], entity.kind))
        names = list(labels)
        self._execute(cursor, _UPSERT_ENTITIES, [
            tenant_id, version_id, names, [labels[n][0] for n in names], [labels[n][1] for n in names]
        ])  # fmt: skip
        self._execute(cursor, _IDS_BY_NAME, [tenant_id, version_id, names])
        ids = dict(cursor.fetchall())
        mentions = [
            (ids[entity.name[:MAX_NAME_CHARS]], chunk_id, entity.count)
            for chunk_id, extraction in graphs.items()
            for entity in extraction.entities
        ]
        relations = [
            (ids[a[:MAX_NAME_CHARS]], ids[b[:MAX_NAME_CHARS]], chunk_id, relation.weight, relation.kind)
            for chunk_id, extraction in graphs.items()
            for relation in extraction.relations
            for a, b in ((relation.source, relation.target), (relation.target, relation.source))
        ]
        if mentions:
            self._execute(cursor, _INSERT_MENTIONS, [tenant_id, version_id, *map(list, zip(*mentions, strict=True))])
        if relations:
            self._execute(cursor, _INSERT_RELATIONS, [tenant_id, version_id, *map(list, zip(*relations, strict=True))])
        return list(ids.values())

    # --- plumbing --------------------------------------------------------------------------------

    def _execute(self, cursor, statement: sql.SQL, params: list) -> None:
        cursor.execute(statement.format(**self._tables).as_string(cursor.cursor), params)

    def _fetch(self, statement: sql.SQL, params: list) -> list[tuple]:
        """Inside a caller's transaction a read gets a savepoint, so a failed one does not abort it;
        outside one (a search, in autocommit) it needs none, and BEGIN/COMMIT would cost two round trips."""
        savepoint = transaction.atomic() if connection.in_atomic_block else nullcontext()
        try:
            with savepoint, connection.cursor() as cursor:
                self._execute(cursor, statement, params)
                return cursor.fetchall()
        except DatabaseError as exc:
            raise GraphStoreError("graph_unavailable", f"the graph tables cannot be read: {exc}") from exc

    def _nodes(self, statement: sql.SQL, params: list) -> list[GraphNode]:
        return [GraphNode(*row) for row in self._fetch(statement, params)]


_NODE_COLUMNS = "id, kb_version_id, name, label, kind, chunk_count"
_FIND_BY_NAME = sql.SQL(
    f"SELECT {_NODE_COLUMNS} FROM {{entities}} WHERE tenant_id = %s AND kb_version_id = ANY(%s) AND name = ANY(%s) "
    "ORDER BY id"
)
# The best match of each name by trigram similarity; ``%%`` (pg_trgm's operator, at its threshold 0.3)
# lets the GIN trigram index find the candidates (so a min_similarity below 0.3 acts as 0.3).
_FIND_SIMILAR = sql.SQL(
    """
    SELECT DISTINCT best.id, best.kb_version_id, best.name, best.label, best.kind, best.chunk_count
    FROM unnest(%s::text[]) AS q(wanted) CROSS JOIN LATERAL (
        SELECT e.id, e.kb_version_id, e.name, e.label, e.kind, e.chunk_count, similarity(e.name, q.wanted) AS score
        FROM {entities} AS e
        WHERE e.tenant_id = %s AND e.kb_version_id = ANY(%s) AND e.name %% q.wanted
        ORDER BY score DESC, e.id LIMIT 1
    ) AS best
    WHERE best.score >= %s ORDER BY best.id
    """
)
_FIND_BY_ID = sql.SQL(
    f"SELECT {_NODE_COLUMNS} FROM {{entities}} WHERE tenant_id = %s AND kb_version_id = ANY(%s) AND id = ANY(%s) "
    "ORDER BY id"
)
# A walk from every seed; an entity's strongest path wins (then the shorter, then the lower ids). The
# seeds are checked against the scope; each step reads only the scope's relations of one entity.
_NEIGHBOURHOOD = sql.SQL(
    """
    WITH RECURSIVE walk(entity_id, hops, strength, path) AS (
        SELECT id, 0, 1.0::float8, ARRAY[id] FROM {entities}
        WHERE tenant_id = %s AND kb_version_id = ANY(%s) AND id = ANY(%s)
      UNION ALL
        SELECT step.target_id, walk.hops + 1, walk.strength * step.weight / (step.weight + 1),
               walk.path || step.target_id
        FROM walk CROSS JOIN LATERAL (
            SELECT target_id, sum(weight) AS weight FROM {relations}
            WHERE source_id = walk.entity_id AND tenant_id = %s AND kb_version_id = ANY(%s)
            GROUP BY target_id ORDER BY sum(weight) DESC, target_id LIMIT %s
        ) AS step
        WHERE walk.hops < %s AND step.target_id <> ALL(walk.path)
    )
    SELECT DISTINCT ON (entity_id) entity_id, hops, strength, path FROM walk
    ORDER BY entity_id, strength DESC, hops, path
    """
)
_MENTIONS = sql.SQL(
    """
    SELECT seed.id, m.chunk_id, m.count FROM unnest(%s::bigint[]) AS seed(id) CROSS JOIN LATERAL (
        SELECT chunk_id, count FROM {mentions}
        WHERE entity_id = seed.id AND tenant_id = %s AND kb_version_id = ANY(%s)
        ORDER BY count DESC, chunk_id LIMIT %s
    ) AS m
    """
)
_CHUNK_TOTAL = sql.SQL("SELECT count(*) FROM {chunks} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
_PING = sql.SQL("SELECT 1 FROM {entities} LIMIT 1")
_DELETE_RELATIONS = sql.SQL(
    "DELETE FROM {relations} WHERE tenant_id = %s AND kb_version_id = %s AND chunk_id = ANY(%s)"
)
_DELETE_MENTIONS = sql.SQL(
    "DELETE FROM {mentions} WHERE tenant_id = %s AND kb_version_id = %s AND chunk_id = ANY(%s) RETURNING entity_id"
)
_UPSERT_ENTITIES = sql.SQL(
    """
    INSERT INTO {entities} (tenant_id, kb_version_id, name, label, kind, chunk_count)
    SELECT %s, %s, name, label, kind, 0 FROM unnest(%s::text[], %s::text[], %s::text[]) AS e(name, label, kind)
    ON CONFLICT (kb_version_id, name) DO NOTHING
    """
)
_IDS_BY_NAME = sql.SQL("SELECT name, id FROM {entities} WHERE tenant_id = %s AND kb_version_id = %s AND name = ANY(%s)")
_INSERT_MENTIONS = sql.SQL(
    """
    INSERT INTO {mentions} (tenant_id, kb_version_id, entity_id, chunk_id, count)
    SELECT %s, %s, entity_id, chunk_id, count FROM unnest(%s::bigint[], %s::bigint[], %s::int[])
        AS m(entity_id, chunk_id, count)
    """
)
_INSERT_RELATIONS = sql.SQL(
    """
    INSERT INTO {relations} (tenant_id, kb_version_id, source_id, target_id, chunk_id, weight, kind)
    SELECT %s, %s, source_id, target_id, chunk_id, weight, kind
    FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::float8[], %s::text[])
        AS r(source_id, target_id, chunk_id, weight, kind)
    """
)
_RECOUNT = sql.SQL(
    """
    UPDATE {entities} AS e SET chunk_count = (SELECT count(*) FROM {mentions} AS m WHERE m.entity_id = e.id)
    WHERE e.tenant_id = %s AND e.kb_version_id = %s AND e.id = ANY(%s)
    """
)
_DROP_UNMENTIONED = sql.SQL(
    "DELETE FROM {entities} WHERE tenant_id = %s AND kb_version_id = %s AND id = ANY(%s) AND chunk_count = 0"
)
_DROP_RELATIONS = sql.SQL("DELETE FROM {relations} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
_DROP_COMMUNITIES = sql.SQL("DELETE FROM {communities} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
# Each relation is stored once per passage and direction: one direction, summed over passages.
_EDGES = sql.SQL(
    """
    SELECT source_id, target_id, sum(weight) FROM {relations}
    WHERE tenant_id = %s AND kb_version_id = %s AND source_id < target_id
    GROUP BY source_id, target_id ORDER BY source_id, target_id
    """
)
_INSERT_COMMUNITY = sql.SQL(
    """
    INSERT INTO {communities} (tenant_id, kb_version_id, level, number, parent, entity_ids, key_entities, summary,
                               analyzed, chunk_ids, embedding)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    """
)
_COMMUNITIES = sql.SQL(
    """
    SELECT kb_version_id, level, number, parent, entity_ids, key_entities, summary, analyzed, chunk_ids, embedding
    FROM {communities} WHERE tenant_id = %s AND kb_version_id = ANY(%s) AND (%s::int IS NULL OR level = %s)
    ORDER BY kb_version_id, level, number
    """
)
_DROP_MENTIONS = sql.SQL("DELETE FROM {mentions} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
_DROP_ENTITIES = sql.SQL("DELETE FROM {entities} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
