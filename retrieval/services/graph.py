"""The graph leg: the query's entities, their neighbourhood, and the passages that mention it.

The query's entities are its candidate names found exactly (normalized, through aliases), plus, for
Latin-script names found no other way, the entity with the most similar name (``GRAPH_FUZZY_SIMILARITY``).

An entity reached from a query entity scores ``strength x GRAPH_HOP_DECAY ** hops x idf`` (strength: the
product of the path's edge strengths ``w / (w + 1)``; idf: ``ln(1 + N / passages mentioning it)``, so
hubs count little); a passage scores the sum over the reached entities it mentions, each scaled by
``1 + ln(mentions)``, and explains itself by its best contribution's path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from django.conf import settings

from engines.base import GraphNode, GraphScope, GraphStep
from knowledge.selectors import entity_extractor_for_tenant
from knowledge.stores import graph_store


@dataclass(frozen=True)
class GraphRanking:
    hits: list[tuple[int, float]]  # (chunk id, score), best first
    paths: dict[int, dict]  # chunk id -> {"entities": matched query entities, "path": labels, "hops"}


def rank_by_graph(tenant_id: int, version_ids: tuple[int, ...], query: str, *, hops: int) -> GraphRanking:
    """Passages of the KB versions ranked by the entities the query names and their neighbours."""
    store = graph_store()
    scope = GraphScope(tenant_id, version_ids)
    extractor = entity_extractor_for_tenant(tenant_id)
    names = extractor.query_names(query)
    seeds = store.find_entities(scope, names)
    if settings.GRAPH_FUZZY_SIMILARITY > 0:
        unresolved = extractor.fuzzy_candidates(names, {seed.name for seed in seeds})
        known = {seed.entity_id for seed in seeds}
        similar = store.find_similar(scope, unresolved, settings.GRAPH_FUZZY_SIMILARITY) if unresolved else []
        seeds += [node for node in similar if node.entity_id not in known]
    if not seeds:
        return GraphRanking([], {})
    steps = store.neighbourhood(scope, [seed.entity_id for seed in seeds], hops, settings.GRAPH_FANOUT)
    nodes = {node.entity_id: node for node in store.entities(scope, sorted({i for s in steps for i in s.path}))}
    total = store.chunk_total(scope)
    scores = {step.entity_id: _entity_score(step, nodes[step.entity_id], total) for step in steps}
    by_entity = {step.entity_id: step for step in steps}
    chunk_scores: dict[int, float] = {}
    best: dict[int, tuple[float, GraphStep]] = {}
    for entity_id, chunk_id, count in store.mentions(scope, list(scores), settings.GRAPH_CHUNKS_PER_ENTITY):
        contribution = scores[entity_id] * (1 + math.log(count))
        chunk_scores[chunk_id] = chunk_scores.get(chunk_id, 0.0) + contribution
        if chunk_id not in best or contribution > best[chunk_id][0]:
            best[chunk_id] = (contribution, by_entity[entity_id])
    matched = sorted({seed.label for seed in seeds})
    paths = {
        chunk_id: {"entities": matched, "path": [nodes[i].label for i in step.path], "hops": step.hops}
        for chunk_id, (_, step) in best.items()
    }
    hits = sorted(chunk_scores.items(), key=lambda hit: (-hit[1], hit[0]))
    return GraphRanking(hits, paths)


def _entity_score(step: GraphStep, node: GraphNode, total: int) -> float:
    idf = math.log(1 + max(total, 1) / max(node.chunk_count, 1))
    return step.strength * settings.GRAPH_HOP_DECAY**step.hops * idf
