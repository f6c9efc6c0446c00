"""The console's reads of the PostgreSQL graph tables (``engines.postgres_graph``): entities by name and
kind, page by page, and an entity's neighbours. Each statement is scoped by tenant and KB version."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from engines.base import GraphNeighbour, GraphNode, GraphScope

_Params = list[Any] | dict[str, Any]


class PostgresGraphBrowsing:
    """``GraphStore.browse`` and ``GraphStore.neighbours`` for ``PostgresGraphStore``, which gives the reads."""

    def _fetch(self, statement: sql.SQL, params: _Params) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def browse(
        self, scope: GraphScope, *, contains: str = "", kind: str = "", offset: int = 0, limit: int = 100
    ) -> tuple[int, list[GraphNode]]:
        params = {"tenant": scope.tenant_id, "versions": list(scope.version_ids), "contains": contains.lower(),
                  "kind": kind, "offset": offset, "limit": limit}  # fmt: skip
        total = int(self._fetch(_BROWSE_COUNT, params)[0][0])
        return total, [GraphNode(*row) for row in self._fetch(_BROWSE, params)] if total > offset else []

    def neighbours(self, scope: GraphScope, entity_id: int, limit: int) -> list[GraphNeighbour]:
        params = {"tenant": scope.tenant_id, "versions": list(scope.version_ids), "entity": entity_id, "limit": limit}
        return [
            GraphNeighbour(neighbour, label, kind, float(weight), int(passages), tuple(sorted({
                (relation, backward) for relation, backward in zip(kinds, backwards, strict=True) if relation
            })))
            for neighbour, label, kind, weight, passages, kinds, backwards in self._fetch(_NEIGHBOURS, params)
        ]  # fmt: skip


_MATCHING = """
    FROM {entities} WHERE tenant_id = %(tenant)s AND kb_version_id = ANY(%(versions)s)
    AND (%(contains)s = '' OR strpos(lower(name), %(contains)s) > 0 OR strpos(lower(label), %(contains)s) > 0)
    AND (%(kind)s = '' OR kind = %(kind)s)
"""
_BROWSE_COUNT = sql.SQL("SELECT count(*)" + _MATCHING)
_BROWSE = sql.SQL(
    "SELECT id, kb_version_id, name, label, kind, chunk_count"
    + _MATCHING
    + "ORDER BY chunk_count DESC, id OFFSET %(offset)s LIMIT %(limit)s"
)
# an edge is stored once per pair and kind, from a typed relation's head (co-occurrence: the lower id first)
_NEIGHBOURS = sql.SQL(
    """
    SELECT n.id, n.label, n.kind, e.weight, e.passages, e.kinds, e.backwards
    FROM (
        SELECT CASE WHEN source_id = %(entity)s THEN target_id ELSE source_id END AS neighbour,
               sum(weight) AS weight, sum(passages) AS passages, array_agg(kind) AS kinds,
               array_agg(source_id <> %(entity)s) AS backwards
        FROM {edges}
        WHERE tenant_id = %(tenant)s AND kb_version_id = ANY(%(versions)s)
          AND (source_id = %(entity)s OR target_id = %(entity)s)
        GROUP BY neighbour
    ) AS e
    JOIN {entities} AS n ON n.id = e.neighbour AND n.tenant_id = %(tenant)s AND n.kb_version_id = ANY(%(versions)s)
    ORDER BY e.weight DESC, n.id LIMIT %(limit)s
    """
)
