"""The entity graph in PostgreSQL tables whose names the caller gives; a k-hop walk in one statement.

Tables (``knowledge.models`` defines them): communities (``level, number, parent``, entity and
chunk id arrays, summary, analyzed summary, embedding), entities (``id, tenant_id, kb_version_id, name, label,
kind, chunk_count``, unique per version and name), mentions (``tenant_id, kb_version_id, entity_id,
chunk_id, count``), edges (``tenant_id, kb_version_id, source_id, target_id, kind, weight, passages``: one
row per entity pair and kind, its weight summed over the passages relating them; co-occurrence (kind
"") with source id < target id, a typed relation from its head to its tail)
and passage relations (``chunk_id, tenant_id, kb_version_id`` and parallel arrays ``source_ids,
target_ids, weights, kinds``: what one passage added to the edges). Mentions belong to a passage and a
passage's relations are subtracted from the edges when it goes, so replacing a document's passages
replaces exactly its part of the graph. Writes to one version's graph take a transaction-level
advisory lock (edges are shared rows: concurrent upserts would otherwise deadlock). Every statement is
scoped by tenant and KB version and parameterized.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from functools import cache
from itertools import chain, repeat
from typing import Any, cast

import numpy as np
from django.db import DatabaseError, connection, transaction
from django.db.backends.utils import CursorWrapper
from psycopg import sql

from engines.base import (
    Community,
    Extraction,
    GraphNode,
    GraphScope,
    GraphStore,
    GraphStoreError,
    GraphWalk,
    PassageBridge,
    ReachedEntity,
    Relations,
)
from engines.database import read_connection
from engines.postgres_graph_browse import PostgresGraphBrowsing

MAX_NAME_CHARS = 200  # the entity table's name and label columns
_Params = list[Any] | dict[str, Any]  # a statement's parameters, by position or by name
_Numbers = Iterable[int | float] | np.ndarray
# pg_advisory_xact_lock(class, version id): one writer of a version's graph at a time
_GRAPH_WRITE_LOCK_CLASS = 15_003


class PostgresGraphStore(PostgresGraphBrowsing, GraphStore):
    name = "postgres"

    def __init__(
        self, *, entities: str, mentions: str, edges: str, passage_relations: str, communities: str, chunks: str
    ):
        self._tables = {
            "communities": sql.Identifier(communities),
            "entities": sql.Identifier(entities),
            "mentions": sql.Identifier(mentions),
            "edges": sql.Identifier(edges),
            "passage_relations": sql.Identifier(passage_relations),
            "chunks": sql.Identifier(chunks),
        }

    def write(
        self, tenant_id: int, version_id: int, graphs: dict[int, Extraction], *, replacing: Sequence[int] = ()
    ) -> None:
        """In one transaction (the caller's, when it has one), one writer of a version's graph at a time."""
        with transaction.atomic(), connection.cursor() as cursor:
            _lock_version_graph(cursor, version_id)
            touched: set[int] = set()
            if replacing:
                touched.update(self._remove(cursor, tenant_id, version_id, list(replacing)))
            if graphs:
                touched.update(self._add(cursor, tenant_id, version_id, graphs))
            if touched:
                self._execute(cursor, _RECOUNT, [tenant_id, version_id, list(touched)])
                self._execute(cursor, _DROP_UNMENTIONED, [tenant_id, version_id, list(touched)])

    def switch_version(self, tenant_id: int, previous_id: int | None, version_id: int) -> None:
        """No-op: a graph query names its versions (``GraphScope``); every version's graph stays."""

    def drop_version(self, tenant_id: int, version_id: int) -> None:
        """The rows go with the version's chunk rows too; this forgets them before (or without) those."""
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in (_DROP_COMMUNITIES, _DROP_EDGES, _DROP_PASSAGE_RELATIONS, _DROP_MENTIONS, _DROP_ENTITIES):
                self._execute(cursor, statement, [tenant_id, [version_id]])

    def find_entities(self, scope: GraphScope, names: list[str]) -> list[GraphNode]:
        return self._nodes(_FIND_BY_NAME, [scope.tenant_id, list(scope.version_ids), names])

    def find_similar(self, scope: GraphScope, names: list[str], min_similarity: float) -> list[GraphNode]:
        if not names:
            return []
        tenant, versions = scope.tenant_id, list(scope.version_ids)
        return self._nodes(_FIND_SIMILAR, [min_similarity, names, tenant, versions, min_similarity])

    def entities(self, scope: GraphScope, entity_ids: list[int]) -> list[GraphNode]:
        return self._nodes(_FIND_BY_ID, [scope.tenant_id, list(scope.version_ids), entity_ids])

    def mentions(self, scope: GraphScope, entity_ids: list[int], per_entity: int) -> list[tuple[int, int, int]]:
        return self._fetch(_MENTIONS, [entity_ids, scope.tenant_id, list(scope.version_ids), per_entity])

    def bridges(
        self, scope: GraphScope, chunk_ids: list[int], hub_passages: int, per_entity: int
    ) -> list[PassageBridge]:
        if not chunk_ids:
            return []
        params = {
            "tenant": scope.tenant_id, "versions": list(scope.version_ids), "chunks": chunk_ids, "hub": hub_passages,
            "per_entity": per_entity,
        }  # fmt: skip
        return [PassageBridge(*row) for row in self._fetch(_BRIDGES, params)]

    def reach(self, scope: GraphScope, seed_ids: list[int], walk: GraphWalk, passages: int) -> list[ReachedEntity]:
        """One statement: the walk, the scores, the path's labels and the passages."""
        params = {
            "passages": passages,
            "tenant": scope.tenant_id, "versions": list(scope.version_ids), "seeds": seed_ids,
            "fanout": walk.fanout, "deep_fanout": walk.deep_fanout, "hub": walk.hub_passages, "frontier": walk.frontier,
            "decay": walk.hop_decay, "entities": walk.entities, "per_entity": walk.per_entity,
        }  # fmt: skip
        return [
            ReachedEntity(
                GraphNode(entity, version, name, label, kind, chunk_count), hops, float(strength), float(score),
                tuple(path), tuple(labels), tuple(relations), tuple(zip(chunks, counts, strict=True)), tuple(reversed_),
            )
            for (entity, version, name, label, kind, chunk_count, hops, strength, score, path, labels, relations,
                 chunks, counts, reversed_) in self._fetch(_reach(walk.hops), params)
        ]  # fmt: skip

    def chunk_total(self, scope: GraphScope) -> int:
        return cast(int, self._fetch(_CHUNK_TOTAL, [scope.tenant_id, list(scope.version_ids)])[0][0])

    def edges(self, tenant_id: int, version_id: int) -> list[tuple[int, int, float]]:
        return [(a, b, float(weight)) for a, b, weight in self._fetch(_EDGES, [tenant_id, version_id])]

    def replace_communities(self, tenant_id: int, version_id: int, communities: list[Community]) -> None:
        rows = [
            (tenant_id, version_id, c.level, c.number, c.parent, list(c.entity_ids), list(c.key_entities),
             c.summary, c.analyzed, list(c.chunk_ids), list(c.embedding))
            for c in communities
        ]  # fmt: skip
        with transaction.atomic(), connection.cursor() as cursor:
            _lock_version_graph(cursor, version_id)  # two replacements at once would insert the same numbers
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

    def _remove(self, cursor: CursorWrapper, tenant_id: int, version_id: int, chunk_ids: list[int]) -> list[int]:
        """Subtract the chunks' relations from the edges (an edge goes with its last passage), delete their
        mentions; the ids of the entities they mentioned."""
        self._execute(cursor, _SUBTRACT_RELATIONS, [tenant_id, version_id, chunk_ids])
        self._execute(cursor, _DELETE_MENTIONS, [tenant_id, version_id, chunk_ids])
        return [row[0] for row in cursor.fetchall()]

    def _add(self, cursor: CursorWrapper, tenant_id: int, version_id: int, graphs: dict[int, Extraction]) -> list[int]:
        """Upsert the entities by name, insert the mentions, then one statement: each relation (a
        co-occurrence with source id < target id, a typed one head to tail) to its passage's row and,
        summed over the batch, to its edge."""
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
        extractions = list(graphs.values())
        # each passage's entities' ids in order: the mention rows, and what its relations' entity indices point to
        entity_ids = np.array(
            [ids[entity.name[:MAX_NAME_CHARS]] for extraction in extractions for entity in extraction.entities],
            dtype=np.int64,
        )
        entity_counts = [len(extraction.entities) for extraction in extractions]
        if len(entity_ids):
            mentions: tuple[_Numbers, ...] = (
                entity_ids, np.repeat(list(graphs), entity_counts),
                [entity.count for extraction in extractions for entity in extraction.entities],
            )  # fmt: skip
            self._execute(cursor, _INSERT_MENTIONS, [tenant_id, version_id, *map(_number_array, mentions)])
        relation_counts = [len(extraction.relations) for extraction in extractions]
        if sum(relation_counts):
            # the batch's relations at once: an entity index plus its passage's offset is a row of entity_ids
            offsets = np.repeat(np.cumsum([0, *entity_counts[:-1]]), relation_counts)
            sources = entity_ids.take(_column(extraction.relations.sources for extraction in extractions) + offsets)
            targets = entity_ids.take(_column(extraction.relations.targets for extraction in extractions) + offsets)
            kinds = {"": 1}  # kind -> its 1-based index in the statement's array of kinds
            kind_indices = _column(tuple(_kind_indices(extraction.relations, kinds)) for extraction in extractions)
            undirected = kind_indices == kinds[""]
            columns: tuple[_Numbers, ...] = (
                np.repeat(list(graphs), relation_counts),
                np.where(undirected, np.minimum(sources, targets), sources),
                np.where(undirected, np.maximum(sources, targets), targets),
                chain.from_iterable(extraction.relations.weights for extraction in extractions),
                kind_indices,
            )  # an edge's ends as stored: a co-occurrence's source id < target id, a typed one's head first
            self._execute(cursor, _ADD_RELATIONS, [
                *map(_number_array, columns), list(kinds), tenant_id, version_id, tenant_id, version_id
            ])  # fmt: skip
        return list(ids.values())

    # --- plumbing --------------------------------------------------------------------------------

    def _execute(self, cursor: CursorWrapper, statement: sql.SQL, params: _Params) -> None:
        cursor.execute(statement.format(**self._tables).as_string(cursor.cursor), params)

    def _fetch(self, statement: sql.SQL, params: _Params) -> list[tuple[Any, ...]]:
        """Inside a caller's transaction a read gets a savepoint, so a failed one does not abort it;
        outside one (a search, in autocommit) it needs none, and BEGIN/COMMIT would cost two round trips."""
        database = read_connection()  # a search's reads: a replica's, or the primary's
        savepoint = transaction.atomic(using=database.alias) if database.in_atomic_block else nullcontext()
        try:
            with savepoint, database.cursor() as cursor:
                self._execute(cursor, statement, params)
                return cast(list[tuple[Any, ...]], cursor.fetchall())
        except DatabaseError as exc:
            raise GraphStoreError("graph_unavailable", f"the graph tables cannot be read: {exc}") from exc

    def _nodes(self, statement: sql.SQL, params: _Params) -> list[GraphNode]:
        return [GraphNode(*row) for row in self._fetch(statement, params)]


def _lock_version_graph(cursor: CursorWrapper, version_id: int) -> None:
    """Until the transaction ends, the one writer of this version's graph."""
    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_GRAPH_WRITE_LOCK_CLASS, version_id & 0x7FFFFFFF])


def _column(parts: Iterable[tuple[int, ...]]) -> np.ndarray:
    """The passages' columns of integers end to end."""
    return np.fromiter(chain.from_iterable(parts), dtype=np.int64)


def _kind_indices(relations: Relations, kinds: dict[str, int]) -> Iterable[int]:
    """Each relation's kind as its index in ``kinds`` (a kind not in it yet joins it)."""
    if not relations.kinds:
        return repeat(kinds[""], len(relations))
    return [kinds.setdefault(kind, len(kinds) + 1) for kind in relations.kinds]


def _number_array(values: _Numbers) -> str:
    """A PostgreSQL array literal of numbers, passed as one parameter. psycopg's client-side binding dumps a
    list element by element in Python: on Chinese ingestion a batch's relation columns (tens of thousands of
    numbers each) were the largest share of the graph writes' time; joined, they are one pass in C."""
    if isinstance(values, np.ndarray):
        values = values.tolist()  # Python's numbers: str() of a numpy scalar is several times slower
    return "{" + ",".join(map(str, values)) + "}"


_NODE_COLUMNS = "id, kb_version_id, name, label, kind, chunk_count"
_FIND_BY_NAME = sql.SQL(
    f"SELECT {_NODE_COLUMNS} FROM {{entities}} WHERE tenant_id = %s AND kb_version_id = ANY(%s) AND name = ANY(%s) "
    "ORDER BY id"
)
# The best match of each name by trigram similarity; ``%%`` (pg_trgm's operator) lets the GIN trigram
# index find the candidates. Its threshold is the wanted similarity (set first, for the statement's
# transaction only: a session setting would outlive it on a pooler's shared server connection), not the default 0.3, which makes a common word's lookup read several times the
# candidates. The result does not depend on it, only the work.
_FIND_SIMILAR = sql.SQL(
    """
    SELECT DISTINCT best.id, best.kb_version_id, best.name, best.label, best.kind, best.chunk_count
    FROM (SELECT set_config('pg_trgm.similarity_threshold', %s::text, true)) AS threshold
    CROSS JOIN unnest(%s::text[]) AS q(wanted) CROSS JOIN LATERAL (
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
_MENTIONS = sql.SQL(
    """
    SELECT seed.id, m.chunk_id, m.count FROM unnest(%s::bigint[]) AS seed(id) CROSS JOIN LATERAL (
        SELECT chunk_id, count FROM {mentions}
        WHERE entity_id = seed.id AND tenant_id = %s AND kb_version_id = ANY(%s)
        ORDER BY count DESC, chunk_id LIMIT %s
    ) AS m
    """
)
_SCOPED = "tenant_id = %(tenant)s AND kb_version_id = ANY(%(versions)s)"
# passage -> an entity it mentions (not its alone, no hub) -> the other passages mentioning it most
_BRIDGES = sql.SQL(
    f"""
    SELECT via.chunk_id, e.id, e.label, e.chunk_count, other.chunk_id
    FROM {{mentions}} AS via JOIN {{entities}} AS e ON e.id = via.entity_id
    CROSS JOIN LATERAL (
        SELECT chunk_id FROM {{mentions}} WHERE entity_id = e.id AND {_SCOPED} AND chunk_id <> via.chunk_id
        ORDER BY count DESC, chunk_id LIMIT %(per_entity)s
    ) AS other
    WHERE via.tenant_id = %(tenant)s AND via.kb_version_id = ANY(%(versions)s) AND via.chunk_id = ANY(%(chunks)s)
      AND e.tenant_id = %(tenant)s AND e.chunk_count BETWEEN 2 AND %(hub)s
    ORDER BY via.chunk_id, e.id, other.chunk_id
    """
)
# The steps of hop n leave the ``frontier`` best-scored entities reached at hop n - 1 (not hubs; an
# entity's score there: its strongest path's strength x ln(1 + N / chunk_count), as ``entity_score`` without
# the hop decay, the same for all of them), each once however many paths reach it. A step follows an
# entity's strongest neighbours: the heaviest edges on either side of the pair (an index each; a pair's
# kinds are summed, so a pair with several kinds is cut by its heaviest kind's edge; the step names that
# kind, and whether it went from a typed relation's tail to its head). Every simple path is kept, the
# strongest wins.
_HOP = """
e{n} AS (
    SELECT source.id AS source_id, step.target_id, step.weight, step.kind, step.reversed
    FROM (SELECT id FROM (
              SELECT DISTINCT ON (w.entity_id) w.entity_id AS id,
                     w.strength * ln(1 + greatest(%(passages)s, 1)::float8 / greatest(e.chunk_count, 1)) AS score
              FROM w{previous} AS w JOIN {{entities}} AS e ON e.id = w.entity_id
              WHERE e.chunk_count <= %(hub)s ORDER BY w.entity_id, w.strength DESC
          ) AS reached ORDER BY score DESC, id LIMIT %(frontier)s) AS source
    CROSS JOIN LATERAL (
        SELECT target_id, sum(weight) AS weight,
               (array_agg(kind ORDER BY kind = '', weight DESC, kind, backward))[1] AS kind,
               (array_agg(backward AND kind <> '' ORDER BY kind = '', weight DESC, kind, backward))[1] AS reversed
        FROM ((SELECT target_id, weight, kind, false AS backward FROM {{edges}} WHERE source_id = source.id
               AND {scoped} ORDER BY weight DESC LIMIT %({fanout})s)
              UNION ALL
              (SELECT source_id, weight, kind, true FROM {{edges}} WHERE target_id = source.id AND {scoped}
               ORDER BY weight DESC LIMIT %({fanout})s)) AS side
        GROUP BY target_id ORDER BY sum(weight) DESC, target_id LIMIT %({fanout})s
    ) AS step
),
w{n} AS (
    SELECT e.target_id AS entity_id, {n} AS hops, w.strength * e.weight / (e.weight + 1) AS strength,
           w.path || e.target_id AS path, w.relations || e.kind AS relations, w.reversed || e.reversed AS reversed
    FROM w{previous} AS w JOIN e{n} AS e ON e.source_id = w.entity_id
    WHERE e.target_id <> ALL(w.path)
),"""
# An entity's mentions are its version's (one tenant's) by construction, and ``scored`` keeps the
# scope's entities only: read by entity alone, they come from the index without a heap fetch.
_REACH = """
WITH w0 AS (
    SELECT id AS entity_id, 0 AS hops, 1.0::float8 AS strength, ARRAY[id] AS path, ARRAY[]::text[] AS relations,
           ARRAY[]::boolean[] AS reversed
    FROM {{entities}} WHERE {scoped} AND id = ANY(%(seeds)s)
),{hops}
best AS (
    SELECT DISTINCT ON (entity_id) * FROM ({walks}) AS walk ORDER BY entity_id, strength DESC, hops, path
),
scored AS (
    SELECT best.*, e.kb_version_id, e.name, e.label, e.kind, e.chunk_count,
           best.strength * power(%(decay)s::float8, best.hops)
               * ln(1 + greatest(%(passages)s, 1)::float8 / greatest(e.chunk_count, 1)) AS score
    FROM best JOIN {{entities}} AS e ON e.id = best.entity_id AND e.tenant_id = %(tenant)s
        AND e.kb_version_id = ANY(%(versions)s)
    ORDER BY score DESC, best.entity_id LIMIT %(entities)s
)
SELECT s.entity_id, s.kb_version_id, s.name, s.label, s.kind, s.chunk_count, s.hops, s.strength, s.score, s.path,
       ARRAY(SELECT l.label FROM unnest(s.path) WITH ORDINALITY AS p(id, i) JOIN {{entities}} AS l ON l.id = p.id
             ORDER BY p.i) AS labels,
       s.relations, coalesce(m.chunks, '{{{{}}}}'), coalesce(m.counts, '{{{{}}}}'), s.reversed
FROM scored AS s CROSS JOIN LATERAL (
    SELECT array_agg(chunk_id ORDER BY count DESC, chunk_id) AS chunks, array_agg(count ORDER BY count DESC, chunk_id)
        AS counts
    FROM (SELECT chunk_id, count FROM {{mentions}} WHERE entity_id = s.entity_id
          ORDER BY count DESC, chunk_id LIMIT %(per_entity)s) AS top
) AS m
ORDER BY s.score DESC, s.entity_id
"""


@cache
def _reach(hops: int) -> sql.SQL:
    """The walk of ``hops`` hops, unrolled: one statement per hop count (the walk's steps, the entities'
    scores and labels, and their passages in one round trip)."""
    steps = "".join(
        _HOP.format(n=n, previous=n - 1, scoped=_SCOPED, fanout="fanout" if n == 1 else "deep_fanout")
        for n in range(1, hops + 1)
    )
    walks = " UNION ALL ".join(f"SELECT * FROM w{n}" for n in range(hops + 1))
    return sql.SQL(_REACH.format(hops=steps, walks=walks, scoped=_SCOPED))


_CHUNK_TOTAL = sql.SQL("SELECT count(*) FROM {chunks} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
_PING = sql.SQL("SELECT 1 FROM {entities} LIMIT 1")
# the passages' relations leave their edges; an edge none is left in goes
_SUBTRACT_RELATIONS = sql.SQL(
    """
    WITH removed AS (
        DELETE FROM {passage_relations} WHERE tenant_id = %s AND kb_version_id = %s AND chunk_id = ANY(%s)
        RETURNING source_ids, target_ids, weights, kinds
    ), lost AS (
        SELECT r.source_id, r.target_id, r.kind, sum(r.weight) AS weight, count(*) AS passages
        FROM removed CROSS JOIN LATERAL unnest(removed.source_ids, removed.target_ids, removed.weights, removed.kinds)
            AS r(source_id, target_id, weight, kind)
        GROUP BY r.source_id, r.target_id, r.kind
    )
    MERGE INTO {edges} AS e USING lost
        ON e.source_id = lost.source_id AND e.target_id = lost.target_id AND e.kind = lost.kind
    WHEN MATCHED AND e.passages <= lost.passages THEN DELETE
    WHEN MATCHED THEN UPDATE SET weight = e.weight - lost.weight, passages = e.passages - lost.passages
    """
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
# each passage's relations to its row (the aggregates of a group see its rows in one order) and, summed,
# to their edges (in key order: concurrent writers would lock them in one order too); a relation's kind
# comes as its index in the batch's array of kinds
_ADD_RELATIONS = sql.SQL(
    """
    WITH r AS (
        SELECT r.chunk_id, r.source_id, r.target_id, r.weight, kinds.names[r.kind] AS kind
        FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::float8[], %s::int[])
            AS r(chunk_id, source_id, target_id, weight, kind)
        CROSS JOIN (SELECT %s::text[] AS names) AS kinds
    ), passages AS (
        INSERT INTO {passage_relations} (chunk_id, tenant_id, kb_version_id, source_ids, target_ids, weights, kinds)
        SELECT chunk_id, %s, %s, array_agg(source_id), array_agg(target_id), array_agg(weight), array_agg(kind)
        FROM r GROUP BY chunk_id
    )
    INSERT INTO {edges} AS e (tenant_id, kb_version_id, source_id, target_id, kind, weight, passages)
    SELECT %s, %s, source_id, target_id, kind, sum(weight), count(*) FROM r
    GROUP BY source_id, target_id, kind ORDER BY source_id, target_id, kind
    ON CONFLICT (source_id, target_id, kind)
        DO UPDATE SET weight = e.weight + excluded.weight, passages = e.passages + excluded.passages
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
_DROP_EDGES = sql.SQL("DELETE FROM {edges} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
_DROP_PASSAGE_RELATIONS = sql.SQL("DELETE FROM {passage_relations} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
_DROP_COMMUNITIES = sql.SQL("DELETE FROM {communities} WHERE tenant_id = %s AND kb_version_id = ANY(%s)")
# an edge per pair (lower id first): its kinds and directions summed
_EDGES = sql.SQL(
    """
    SELECT least(source_id, target_id) AS a, greatest(source_id, target_id) AS b, sum(weight)
    FROM {edges} WHERE tenant_id = %s AND kb_version_id = %s GROUP BY a, b ORDER BY a, b
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
