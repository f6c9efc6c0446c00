"""The entity graph in Neo4j, through neomodel (``NEO4J_URL``, e.g. ``neo4j://user:password@host:7687``).

``(:GraphEntity)-[:MENTIONED_IN {count}]->(:GraphPassage)`` and ``(:GraphEntity)-[:RELATED {chunk_id,
weight, kind, forward}]->(:GraphEntity)`` (one edge per passage and direction; ``forward`` false on the
one from a typed relation's tail to its head), ``(:GraphCommunity {level, number,
...})`` holding its members' ids and summary as properties, the tenant and KB version on every
node and edge and in every query. Entity ids are a hash of (tenant, version, name), so both backends
hand out plain integers. Walks expand one hop per query (the ``fanout`` strongest relations of each
frontier entity) and keep every simple path, as the PostgreSQL statement does. Every query runs with a
transaction timeout, and the driver with connection and acquisition timeouts: a total deadline.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit, urlunsplit

import neo4j
from neo4j.exceptions import DriverError, Neo4jError
from neomodel import IntegerProperty, StringProperty, StructuredNode, db

from engines.base import (
    Community,
    Extraction,
    GraphNeighbour,
    GraphNode,
    GraphScope,
    GraphStore,
    GraphStoreError,
    GraphWalk,
    PassageBridge,
    ReachedEntity,
    entity_score,
)
from engines.deadline import DeadlineExceeded, within


class GraphEntityNode(StructuredNode):
    """Declares the indexes neomodel installs on startup; queries are plain Cypher."""

    __label__ = "GraphEntity"
    tenant_id = IntegerProperty(index=True)
    version_id = IntegerProperty(index=True)
    entity_id = IntegerProperty(index=True)
    name = StringProperty(index=True)


class GraphPassageNode(StructuredNode):
    __label__ = "GraphPassage"
    tenant_id = IntegerProperty(index=True)
    version_id = IntegerProperty(index=True)
    chunk_id = IntegerProperty(index=True)


class GraphCommunityNode(StructuredNode):
    __label__ = "GraphCommunity"
    tenant_id = IntegerProperty(index=True)
    version_id = IntegerProperty(index=True)
    level = IntegerProperty(index=True)


def entity_id(tenant_id: int, version_id: int, name: str) -> int:
    """A stable positive 63-bit id for an entity of one KB version."""
    digest = hashlib.blake2b(f"{tenant_id}/{version_id}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class Neo4jGraphStore(GraphStore):
    name = "neo4j"

    def __init__(self, url: str, *, timeout_s: float, write_timeout_s: float = 120.0):
        parts = urlsplit(url)
        auth = (parts.username, parts.password or "") if parts.username else None
        address = urlunsplit(
            (parts.scheme, (parts.hostname or "") + (f":{parts.port}" if parts.port else ""), "", "", "")
        )
        # Searches wait ``timeout_s`` at most (they degrade); ingestion's writes are offline work whose
        # batches may take longer on a busy server, like Elasticsearch's bulk loads (``write_timeout_s``).
        self.address, self.timeout_s, self.write_timeout_s = address, timeout_s, write_timeout_s
        self._driver = neo4j.GraphDatabase.driver(
            address,
            auth=auth,
            connection_timeout=timeout_s,
            connection_acquisition_timeout=timeout_s,
            max_transaction_retry_time=0,
        )
        db.set_connection(driver=self._driver)
        try:
            for node in (GraphEntityNode, GraphPassageNode, GraphCommunityNode):
                db.install_labels(node)
            self._write(_NAME_INDEX, {})
        except (DriverError, Neo4jError, OSError) as exc:
            raise GraphStoreError("graph_unavailable", f"Neo4j at {address} did not answer: {exc}") from exc

    def write(
        self, tenant_id: int, version_id: int, graphs: dict[int, Extraction], *, replacing: Sequence[int] = ()
    ) -> None:
        scope = {"tenant": tenant_id, "version": version_id}
        touched: set[int] = set()
        if replacing:
            self._write(_DELETE_RELATIONS, {**scope, "chunks": list(replacing)})
            rows = self._write(_DELETE_PASSAGES, {**scope, "chunks": list(replacing)})
            touched.update(rows[0][0] if rows else [])
        if graphs:
            passages: list[dict[str, Any]] = [
                {
                    "chunk_id": chunk_id,
                    "entities": [
                        {"id": entity_id(tenant_id, version_id, e.name), "name": e.name, "label": e.label,
                         "kind": e.kind, "count": e.count}
                        for e in extraction.entities
                    ],
                }
                for chunk_id, extraction in graphs.items()
            ]  # fmt: skip
            relations = [
                {"chunk_id": chunk_id, "source": source, "target": target, "weight": weight, "kind": kind}
                for chunk_id, extraction in graphs.items()
                for source, target, weight, kind in extraction.named_relations()
            ]
            self._write(_ADD_PASSAGES, {**scope, "passages": passages})
            self._write(_ADD_RELATIONS, {**scope, "relations": relations})
            touched.update(e["id"] for passage in passages for e in passage["entities"])
        if touched:
            self._write(_RECOUNT, {**scope, "ids": list(touched)})

    def entities(self, scope: GraphScope, entity_ids: list[int]) -> list[GraphNode]:
        return self._nodes(_FIND, {**_params(scope), "names": None, "ids": entity_ids})

    def find_entities(self, scope: GraphScope, names: list[str]) -> list[GraphNode]:
        return self._nodes(_FIND, {**_params(scope), "names": names, "ids": None})

    def find_similar(self, scope: GraphScope, names: list[str], min_similarity: float) -> list[GraphNode]:
        """Lucene's fuzzy match on the entity-name full-text index: each word within an edit distance
        of ``round(2 * (1 - min_similarity))``; the best-scored entity in scope per name."""
        found: dict[int, GraphNode] = {}
        edits = max(0, min(2, round(2 * (1 - min_similarity))))
        for name in names:
            words = [_LUCENE_SPECIAL.sub(r"\\\g<0>", word) for word in name.split()]
            if not words:
                continue
            query = " AND ".join(f"{word}~{edits}" for word in words)
            for node in self._nodes(_FIND_FUZZY, {**_params(scope), "query": query}):
                found.setdefault(node.entity_id, node)
        return [found[entity] for entity in sorted(found)]

    def browse(
        self, scope: GraphScope, *, contains: str = "", kind: str = "", offset: int = 0, limit: int = 100
    ) -> tuple[int, list[GraphNode]]:
        params = {**_params(scope), "contains": contains.lower(), "kind": kind, "offset": offset, "limit": limit}
        total = cast(int, self._run(_BROWSE_COUNT, params)[0][0])
        return total, self._nodes(_BROWSE, params) if total > offset else []

    def neighbours(self, scope: GraphScope, entity_id: int, limit: int) -> list[GraphNeighbour]:
        """Each passage's relation is an edge either way: the entity's outgoing ones count each once."""
        rows = self._run(_NEIGHBOURS, {**_params(scope), "entity": entity_id, "limit": limit})
        return [
            GraphNeighbour(neighbour, label, kind, float(weight), int(passages),
                           tuple(sorted({(relation, not forward) for relation, forward in relations if relation})))
            for neighbour, label, kind, weight, passages, relations in rows
        ]  # fmt: skip

    def mentions(self, scope: GraphScope, entity_ids: list[int], per_entity: int) -> list[tuple[int, int, int]]:
        rows = self._run(_MENTIONS, {**_params(scope), "ids": entity_ids, "per": per_entity})
        return [tuple(row) for row in rows]

    def bridges(
        self, scope: GraphScope, chunk_ids: list[int], hub_passages: int, per_entity: int
    ) -> list[PassageBridge]:
        if not chunk_ids:
            return []
        rows = self._run(_BRIDGES, {**_params(scope), "chunks": chunk_ids, "hub": hub_passages, "per": per_entity})
        return [PassageBridge(*row) for row in rows]

    def reach(self, scope: GraphScope, seed_ids: list[int], walk: GraphWalk, passages: int) -> list[ReachedEntity]:
        """One query per hop (the strongest relations of the ``frontier`` best-scored entities the hop
        before reached), then the scores in Python and one query for the passages."""
        nodes = {node.entity_id: node for node in self.entities(scope, seed_ids)}
        walks = [_Walk(seed, 0, 1.0, (seed,), (), ()) for seed in sorted(nodes)]
        frontier = walks
        for hop in range(1, walk.hops + 1):
            path_strength: dict[int, float] = {}  # a frontier entity's strongest path's
            for w in frontier:
                if nodes[w.entity_id].chunk_count <= walk.hub_passages:
                    path_strength[w.entity_id] = max(w.strength, path_strength.get(w.entity_id, 0.0))
            scored = {
                entity: entity_score(strength, 0, nodes[entity].chunk_count, passages, walk.hop_decay)
                for entity, strength in path_strength.items()
            }
            sources = sorted(sorted(scored, key=lambda entity: (-scored[entity], entity))[: walk.frontier])
            fanout = walk.fanout if hop == 1 else walk.deep_fanout
            edges: dict[int, list[tuple[int, float, str, bool]]] = {}
            strongest = self._run(_STRONGEST, {**_params(scope), "ids": sources, "fanout": fanout})
            for source, target, weight, kind, forward in strongest:
                edges.setdefault(source, []).append((target, weight, kind, bool(kind) and not forward))
            frontier = [
                _Walk(target, hop, w.strength * weight / (weight + 1), (*w.path, target), (*w.relations, kind),
                      (*w.reversed, reversed_))
                for w in frontier
                for target, weight, kind, reversed_ in edges.get(w.entity_id, [])
                if target not in w.path
            ]  # fmt: skip
            unknown = sorted({w.entity_id for w in frontier} - set(nodes))
            nodes.update((node.entity_id, node) for node in self.entities(scope, unknown))
            walks += frontier
        best: dict[int, _Walk] = {}
        for w in walks:  # the strongest path, then the shortest, then the lowest ids (as the SQL orders)
            kept = best.get(w.entity_id)
            if kept is None or (-w.strength, w.hops, w.path) < (-kept.strength, kept.hops, kept.path):
                best[w.entity_id] = w
        scores = {
            entity: entity_score(w.strength, w.hops, nodes[entity].chunk_count, passages, walk.hop_decay)
            for entity, w in best.items()
        }
        chosen = sorted(best, key=lambda entity: (-scores[entity], entity))[: walk.entities]
        mentioning: dict[int, list[tuple[int, int]]] = {}
        if chosen:
            for entity, chunk_id, count in self.mentions(scope, chosen, walk.per_entity):
                mentioning.setdefault(entity, []).append((chunk_id, count))
        return [
            ReachedEntity(
                nodes[entity], best[entity].hops, best[entity].strength, scores[entity], best[entity].path,
                tuple(nodes[i].label for i in best[entity].path), best[entity].relations,
                tuple(mentioning.get(entity, ())), best[entity].reversed,
            )
            for entity in chosen
        ]  # fmt: skip

    def chunk_total(self, scope: GraphScope) -> int:
        return cast(int, self._run(_CHUNK_TOTAL, _params(scope))[0][0])

    def edges(self, tenant_id: int, version_id: int) -> list[tuple[int, int, float]]:
        rows = self._run(_EDGES, {"tenant": tenant_id, "version": version_id})
        return [(a, b, float(weight)) for a, b, weight in rows]

    def replace_communities(self, tenant_id: int, version_id: int, communities: list[Community]) -> None:
        rows = [
            {"level": c.level, "number": c.number, "parent": c.parent, "entity_ids": list(c.entity_ids),
             "key_entities": list(c.key_entities), "summary": c.summary, "analyzed": c.analyzed,
             "chunk_ids": list(c.chunk_ids), "embedding": list(c.embedding)}
            for c in communities
        ]  # fmt: skip
        self._write(_REPLACE_COMMUNITIES, {"tenant": tenant_id, "version": version_id, "rows": rows})

    def communities(self, scope: GraphScope, level: int | None = None) -> list[Community]:
        rows = self._run(_COMMUNITIES, {**_params(scope), "level": level})
        return [
            Community(version, lvl, number, parent, tuple(entities), tuple(keys), summary, analyzed, tuple(chunks),
                      tuple(embedding or ()))
            for version, lvl, number, parent, entities, keys, summary, analyzed, chunks, embedding in rows
        ]  # fmt: skip

    def ping(self) -> str:
        self._run("RETURN 1", {})
        return f"neo4j at {self.address}"

    def switch_version(self, tenant_id: int, previous_id: int | None, version_id: int) -> None:
        """No-op: a graph query names its versions (``GraphScope``); every version's graph stays."""

    def drop_version(self, tenant_id: int, version_id: int) -> None:
        self._write(_DROP_VERSIONS, {"tenant": tenant_id, "versions": [version_id]})

    def _write(self, cypher: str, params: dict[str, Any]) -> list[list[Any]]:
        return self._run(cypher, params, timeout_s=self.write_timeout_s)

    def _run(self, cypher: str, params: dict[str, Any], *, timeout_s: float | None = None) -> list[list[Any]]:
        """One query within a total deadline: the transaction timeout bounds the server's work, but a
        server that stops answering (frozen, its host gone) would hold a Bolt read forever."""
        deadline_s = timeout_s or self.timeout_s
        query = neo4j.Query(cypher, timeout=deadline_s)
        try:
            records, _, _ = within(deadline_s, lambda: self._driver.execute_query(query, params))
        except DeadlineExceeded as exc:
            raise GraphStoreError("deadline", f"Neo4j did not answer: {exc}") from exc
        except (DriverError, Neo4jError, OSError) as exc:
            raise GraphStoreError("graph_unavailable", f"Neo4j did not answer: {exc}") from exc
        return [list(record.values()) for record in records]

    def _nodes(self, cypher: str, params: dict[str, Any]) -> list[GraphNode]:
        return [GraphNode(*row) for row in self._run(cypher, params)]


_LUCENE_SPECIAL = re.compile(r'[+\-&|!(){}\[\]^"~*?:\\/]')


class _Walk(NamedTuple):
    entity_id: int
    hops: int
    strength: float
    path: tuple[int, ...]
    relations: tuple[str, ...]
    reversed: tuple[bool, ...]


def _params(scope: GraphScope) -> dict[str, Any]:
    return {"tenant": scope.tenant_id, "versions": list(scope.version_ids)}


_DELETE_RELATIONS = """
MATCH (:GraphEntity {tenant_id: $tenant, version_id: $version})-[r:RELATED]->()
WHERE r.tenant_id = $tenant AND r.version_id = $version AND r.chunk_id IN $chunks
DELETE r
"""
_DELETE_PASSAGES = """
MATCH (p:GraphPassage {tenant_id: $tenant, version_id: $version}) WHERE p.chunk_id IN $chunks
OPTIONAL MATCH (n:GraphEntity {tenant_id: $tenant, version_id: $version})-[:MENTIONED_IN]->(p)
WITH collect(DISTINCT n.entity_id) AS touched, collect(DISTINCT p) AS passages
FOREACH (passage IN passages | DETACH DELETE passage)
RETURN touched
"""
_ADD_PASSAGES = """
UNWIND $passages AS passage
MERGE (p:GraphPassage {tenant_id: $tenant, version_id: $version, chunk_id: passage.chunk_id})
WITH p, passage
UNWIND passage.entities AS e
MERGE (n:GraphEntity {tenant_id: $tenant, version_id: $version, name: e.name})
  ON CREATE SET n.entity_id = e.id, n.label = e.label, n.kind = e.kind, n.chunk_count = 0
CREATE (n)-[:MENTIONED_IN {tenant_id: $tenant, version_id: $version, count: e.count}]->(p)
"""
_ADD_RELATIONS = """
UNWIND $relations AS r
MATCH (a:GraphEntity {tenant_id: $tenant, version_id: $version, name: r.source})
MATCH (b:GraphEntity {tenant_id: $tenant, version_id: $version, name: r.target})
CREATE (a)-[:RELATED {tenant_id: $tenant, version_id: $version, chunk_id: r.chunk_id, weight: r.weight, kind: r.kind,
                      forward: true}]->(b)
CREATE (b)-[:RELATED {tenant_id: $tenant, version_id: $version, chunk_id: r.chunk_id, weight: r.weight, kind: r.kind,
                      forward: false}]->(a)
"""
_RECOUNT = """
MATCH (n:GraphEntity {tenant_id: $tenant, version_id: $version}) WHERE n.entity_id IN $ids
OPTIONAL MATCH (n)-[m:MENTIONED_IN {tenant_id: $tenant, version_id: $version}]->()
WITH n, count(m) AS mentions
SET n.chunk_count = mentions
WITH n, mentions WHERE mentions = 0
DETACH DELETE n
"""
_FIND = """
MATCH (n:GraphEntity {tenant_id: $tenant})
WHERE n.version_id IN $versions AND ($names IS NULL OR n.name IN $names) AND ($ids IS NULL OR n.entity_id IN $ids)
RETURN n.entity_id, n.version_id, n.name, n.label, n.kind, n.chunk_count ORDER BY n.entity_id
"""
_BROWSE_MATCH = """
MATCH (n:GraphEntity {tenant_id: $tenant})
WHERE n.version_id IN $versions AND ($kind = '' OR n.kind = $kind)
  AND ($contains = '' OR toLower(n.name) CONTAINS $contains OR toLower(n.label) CONTAINS $contains)
"""
_BROWSE_COUNT = _BROWSE_MATCH + "RETURN count(n)"
_BROWSE = (
    _BROWSE_MATCH
    + """RETURN n.entity_id, n.version_id, n.name, n.label, n.kind, n.chunk_count
ORDER BY n.chunk_count DESC, n.entity_id SKIP $offset LIMIT $limit"""
)
_NEIGHBOURS = """
MATCH (s:GraphEntity {tenant_id: $tenant, entity_id: $entity})-[r:RELATED {tenant_id: $tenant}]->(t:GraphEntity)
WHERE s.version_id IN $versions AND r.version_id IN $versions AND t.tenant_id = $tenant
WITH t, sum(r.weight) AS weight, count(r) AS passages, collect([r.kind, coalesce(r.forward, true)]) AS relations
RETURN t.entity_id, t.label, t.kind, weight, passages, relations ORDER BY weight DESC, t.entity_id LIMIT $limit
"""
_STRONGEST = """
MATCH (s:GraphEntity {tenant_id: $tenant})-[r:RELATED {tenant_id: $tenant}]->(t:GraphEntity {tenant_id: $tenant})
WHERE s.entity_id IN $ids AND s.version_id IN $versions AND r.version_id IN $versions
WITH s.entity_id AS source, t.entity_id AS target, r, coalesce(r.forward, true) AS forward
ORDER BY r.kind = '', r.weight DESC, r.kind, forward DESC
WITH source, target, sum(r.weight) AS weight, collect(r.kind)[0] AS kind, collect(forward)[0] AS forward
ORDER BY source, weight DESC, target
WITH source, collect([target, weight, kind, forward])[..$fanout] AS strongest
UNWIND strongest AS edge
RETURN source, edge[0], edge[1], edge[2], edge[3]
"""
_MENTIONS = """
UNWIND $ids AS id
MATCH (n:GraphEntity {tenant_id: $tenant, entity_id: id})-[m:MENTIONED_IN {tenant_id: $tenant}]->(p:GraphPassage)
WHERE n.version_id IN $versions
WITH id, p.chunk_id AS chunk_id, m.count AS count ORDER BY id, count DESC, chunk_id
WITH id, collect([chunk_id, count])[..$per] AS top
UNWIND top AS hit
RETURN id, hit[0], hit[1]
"""
_BRIDGES = """
UNWIND $chunks AS via
MATCH (p:GraphPassage {tenant_id: $tenant, chunk_id: via})<-[:MENTIONED_IN {tenant_id: $tenant}]-(n:GraphEntity)
WHERE p.version_id IN $versions AND n.tenant_id = $tenant AND n.chunk_count >= 2 AND n.chunk_count <= $hub
MATCH (n)-[m:MENTIONED_IN {tenant_id: $tenant}]->(o:GraphPassage)
WHERE o.chunk_id <> via
WITH via, n, o.chunk_id AS chunk_id, m.count AS count ORDER BY via, n.entity_id, count DESC, chunk_id
WITH via, n, collect(chunk_id)[..$per] AS top
UNWIND top AS chunk_id
WITH via, n, chunk_id ORDER BY via, n.entity_id, chunk_id
RETURN via, n.entity_id, n.label, n.chunk_count, chunk_id
"""
_DROP_VERSIONS = """
MATCH (n) WHERE (n:GraphEntity OR n:GraphPassage OR n:GraphCommunity) AND n.tenant_id = $tenant AND n.version_id IN $versions
DETACH DELETE n
"""
_CHUNK_TOTAL = """
MATCH (p:GraphPassage {tenant_id: $tenant}) WHERE p.version_id IN $versions RETURN count(p)
"""
_EDGES = """
MATCH (a:GraphEntity {tenant_id: $tenant, version_id: $version})-[r:RELATED {tenant_id: $tenant, version_id: $version}]->
      (b:GraphEntity {tenant_id: $tenant, version_id: $version})
WHERE a.entity_id < b.entity_id
RETURN a.entity_id, b.entity_id, sum(r.weight) ORDER BY a.entity_id, b.entity_id
"""
_REPLACE_COMMUNITIES = """
OPTIONAL MATCH (old:GraphCommunity {tenant_id: $tenant, version_id: $version})
DETACH DELETE old
WITH count(*) AS dropped
UNWIND $rows AS row
CREATE (c:GraphCommunity {tenant_id: $tenant, version_id: $version})
SET c += row
"""
_COMMUNITIES = """
MATCH (c:GraphCommunity {tenant_id: $tenant})
WHERE c.version_id IN $versions AND ($level IS NULL OR c.level = $level)
RETURN c.version_id, c.level, c.number, c.parent, c.entity_ids, c.key_entities, c.summary, c.analyzed, c.chunk_ids,
       c.embedding
ORDER BY c.version_id, c.level, c.number
"""
_NAME_INDEX = """
CREATE FULLTEXT INDEX graph_entity_names IF NOT EXISTS FOR (n:GraphEntity) ON EACH [n.name]
"""
_FIND_FUZZY = """
CALL db.index.fulltext.queryNodes('graph_entity_names', $query) YIELD node, score
WHERE node.tenant_id = $tenant AND node.version_id IN $versions
RETURN node.entity_id, node.version_id, node.name, node.label, node.kind, node.chunk_count
ORDER BY score DESC, node.entity_id LIMIT 1
"""
