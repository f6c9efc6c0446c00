"""The graph leg: the query's entities, their neighbourhood, and the passages that mention it.

The query's entities are its candidate names (its entities and word n-grams) found exactly (normalized,
through aliases), plus, for the Latin-script names it writes like names (capitalized names, key phrases)
found no other way, the entity with the most similar name (``GRAPH_FUZZY_SIMILARITY``).

An entity reached from a query entity scores ``strength x GRAPH_HOP_DECAY ** hops x idf`` (strength: the
product of the path's edge strengths ``w / (w + 1)``; idf: ``ln(1 + N / passages mentioning it)``, so
hubs count little); a passage scores the sum over the reached entities it mentions, each scaled by
``1 + ln(mentions)``, and explains itself by its best contribution's path.

A ranking's ``ceiling`` is what a passage naming each query entity once would score: the sum of the
query entities' idfs, plus, for each name the query writes like a name that no entity matched exactly,
the idf of the rarest possible entity (as BM25's ceiling counts a token absent from the KB). ``relevance``
divides a graph score by it (``retrieval.relevance``).

Bridges (three-way hybrid's bridge slots, ``retrieval.services.bridges``): from the graph's best passages
naming a query entity (its anchors), through each entity such a passage mentions and a few others do
too, to those other passages: the second document of a multi-hop question, which shares no word with it.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from cachetools import TTLCache, cached
from django.conf import settings

from engines.base import GraphScope, GraphStore, GraphWalk, ReachedEntity, entity_score
from engines.graph_extraction import EXTRACTOR_VERSION
from engines.graph_relations import relation_name
from graph.query_setup import GraphQuerySetup, graph_query_setup
from graph.readable import ReadableChunks, ReadableGraph
from knowledge.stores import graph_store

CO_OCCURRENCE = "co_occurs"  # the kind a path names for relations found by co-occurrence (untyped)
PASSAGE_COUNT_TTL_S = 60.0


@dataclass(frozen=True)
class GraphBridge:
    """A passage the graph reaches from ``via``, a passage naming a query entity, through an entity both
    mention (``entity``, its label); ``weight``: that entity's idf, ln(1 + N / passages mentioning it)."""

    via: int
    chunk_id: int
    weight: float
    entity: str


@dataclass(frozen=True)
class GraphRanking:
    hits: list[tuple[int, float]]  # (chunk id, score), best first
    matched: list[str] = field(default_factory=list)  # the query entities' labels
    reached: dict[int, ReachedEntity] = field(default_factory=dict)  # chunk id -> its best contribution's entity
    notes: list[str] = field(default_factory=list)  # graphs another extractor built
    anchors: list[int] = field(default_factory=list)  # passages naming a query entity, the best first
    ceiling: float = 0.0  # the score of a passage naming each query entity once (0.0: no query entity)

    def explanation(self, chunk_id: int) -> dict[str, Any]:
        """How the graph found a hit: ``{"entities": matched query entities, "path", "hops"}`` (built for
        the hits a leg keeps only: a 2-hop ranking at 100k passages holds hundreds)."""
        reached = self.reached[chunk_id]
        return {"entities": self.matched, "path": _path(reached), "hops": reached.hops}


def rank_by_graph(
    tenant_id: int,
    version_ids: tuple[int, ...],
    query: str,
    *,
    hops: int,
    setup: GraphQuerySetup | None = None,
    readable: ReadableChunks | None = None,
) -> GraphRanking:
    """Passages of the KB versions ranked by the entities the query names and their neighbours.
    ``setup``: a search's (``SearchContext.graph_setup``), else read for these versions. ``readable``:
    the reader's check when it may not read every passage; then only entities and steps learned from
    passages it may read are matched, walked and named (``graph.readable``)."""
    store = graph_store()
    scope = GraphScope(tenant_id, version_ids)
    setup = setup or graph_query_setup(tenant_id, version_ids)
    notes = [
        f"the graph of KB version {version_id} was extracted by extractor {built_by}, the service runs "
        f"{EXTRACTOR_VERSION}: run `manage.py rebuild_graph` so its entities match the query's"
        for version_id, built_by in setup.other_extractors.items()
    ]
    names = setup.extractor.query_names(query)
    curated = setup.curation  # a name a curator merged or renamed finds its entity
    seeds = store.find_entities(scope, list(dict.fromkeys([*names, *map(curated.resolve, names)])))
    unresolved: list[str] = []
    if settings.GRAPH_FUZZY_SIMILARITY > 0:
        unresolved = setup.extractor.fuzzy_candidates(query, {seed.name for seed in seeds})
        known = {seed.entity_id for seed in seeds}
        similar = store.find_similar(scope, unresolved, settings.GRAPH_FUZZY_SIMILARITY) if unresolved else []
        seeds += [node for node in similar if node.entity_id not in known]
    if readable is not None and seeds:  # a query entity known only from hidden passages is absent to the reader
        named = ReadableGraph(store, scope, [seed.entity_id for seed in seeds], readable)
        seeds = [seed for seed in seeds if named.named(seed.entity_id)]
    if not seeds:
        return GraphRanking([], notes=notes)
    walk = GraphWalk(
        hops=hops, fanout=settings.GRAPH_FANOUT, deep_fanout=settings.GRAPH_DEEP_FANOUT,
        hub_passages=settings.GRAPH_HUB_PASSAGES, frontier=settings.GRAPH_FRONTIER, hop_decay=settings.GRAPH_HOP_DECAY,
        entities=settings.GRAPH_MAX_ENTITIES, per_entity=settings.GRAPH_CHUNKS_PER_ENTITY,
    )  # fmt: skip
    chunk_scores: dict[int, float] = {}
    best: dict[int, tuple[float, ReachedEntity]] = {}
    total = _passages_in(store, scope)
    ceiling = len(unresolved) * entity_score(1.0, 0, 1, total, settings.GRAPH_HOP_DECAY)
    walked = store.reach(scope, [seed.entity_id for seed in seeds], walk, total)
    if readable is not None:  # nor walked through, nor named on a path
        shown = ReadableGraph(store, scope, (entity for r in walked for entity in r.path), readable)
        walked = [reached for reached in walked if shown.walk(reached)]
    for reached in walked:
        if reached.hops == 0:
            ceiling += reached.score
        for chunk_id, count in reached.passages:
            contribution = reached.score * (1 + math.log(count))
            chunk_scores[chunk_id] = chunk_scores.get(chunk_id, 0.0) + contribution
            if chunk_id not in best or contribution > best[chunk_id][0]:
                best[chunk_id] = (contribution, reached)
    hits = sorted(chunk_scores.items(), key=itemgetter(0))
    hits.sort(key=itemgetter(1), reverse=True)  # stable: ties keep the lower id first
    reached_by = {chunk_id: reached for chunk_id, (_, reached) in best.items()}
    anchors = [chunk_id for chunk_id, _ in hits if reached_by[chunk_id].hops == 0]
    return GraphRanking(hits, sorted({seed.label for seed in seeds}), reached_by, notes, anchors, ceiling)


def bridges_from(tenant_id: int, version_ids: tuple[int, ...], anchors: list[int]) -> list[GraphBridge]:
    """The passages one passage on from ``anchors`` (through an entity in at most
    ``GRAPH_BRIDGE_HUB_PASSAGES`` passages, to its ``GRAPH_BRIDGE_PER_ENTITY`` passages mentioning it
    most), none of them an anchor, each step weighted by its entity's idf."""
    store = graph_store()
    scope = GraphScope(tenant_id, version_ids)
    steps = store.bridges(scope, anchors, settings.GRAPH_BRIDGE_HUB_PASSAGES, settings.GRAPH_BRIDGE_PER_ENTITY)
    if not steps:
        return []
    total, named = _passages_in(store, scope), set(anchors)
    return [
        GraphBridge(step.via, step.chunk_id, entity_score(1.0, 0, step.chunk_count, total, 1.0), step.label)
        for step in steps
        if step.chunk_id not in named
    ]


@cached(TTLCache(maxsize=10_000, ttl=PASSAGE_COUNT_TTL_S), key=lambda store, scope: scope, lock=threading.Lock())
def _passages_in(store: GraphStore, scope: GraphScope) -> int:
    """The scope's passage count (the N of the entities' idf), counted at most every
    ``PASSAGE_COUNT_TTL_S`` per process: at 100k passages the count costs more than the walk, and N
    moves the scores little between two counts."""
    return store.chunk_total(scope)


def _path(reached: ReachedEntity) -> list[str]:
    """The path as the API shows it: entity labels with each relation's kind between them, a typed one
    read in the walk's direction ("PPR-9087 made_by 锁匠科技", "锁匠科技 makes PPR-9087")."""
    path = [reached.labels[0]]
    steps = zip(reached.relations, reached.reversed, reached.labels[1:], strict=True)
    for kind, reversed_, label in steps:
        path += [relation_name(kind, reversed_=reversed_) or CO_OCCURRENCE, label]
    return path
