"""The fusion stage: the legs' lists deduplicated by content and fused (the math is ``retrieval.fusion_functions``),
with the graph's list gated below the other legs' heads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from django.conf import settings

from graph.ranking import GraphBridge
from retrieval import selectors
from retrieval.fusion_functions import (
    FusedCandidate,
    RankedList,
    min_max,
    reciprocal_rank_fusion,
    score_fusion,
    weighted_by_evidence,
)
from retrieval.relevance import CALIBRATED, RelevanceScales
from retrieval.services.bridges import BridgeSlots, place_bridges
from retrieval.tuning import FusionSettings
from tenants.models import Tenant


@dataclass(frozen=True)
class GraphGate:
    lists: list[RankedList]  # the lists to fuse: the graph's without the others' heads
    head: frozenset[str]  # content hashes of the passages in another list's top GRAPH_FUSION_HEAD
    weight: float  # the graph list's weight


def fuse(
    tenant: Tenant,
    lists: list[RankedList],
    known_hashes: dict[int, str],
    fusion: FusionSettings,
    scales: RelevanceScales,
    bridges: Sequence[GraphBridge] = (),
) -> list[FusedCandidate]:
    """Weighted RRF, or the weighted sum of each list's normalized scores (``fusion.fusion``),
    deduplicated by content hash; hits deleted since their index returned them drop out. The graph's
    list is gated (:func:`gate_graph`) against the other lists' top ``GRAPH_FUSION_HEAD``; its
    ``bridges`` may then take a few ranks inside the top 10 (``bridges.place_bridges``)."""
    fused, hashes = _gated(tenant, lists, known_hashes, fusion, scales, {bridge.chunk_id for bridge in bridges})
    if not bridges or all(ranked.retriever == "graph" for ranked in lists):
        return fused
    slots = BridgeSlots(settings.GRAPH_BRIDGE_SLOTS, settings.GRAPH_BRIDGE_RANK, settings.GRAPH_BRIDGE_HEAD)
    graph_query = next((ranked.query for ranked in lists if ranked.retriever == "graph"), "")
    return place_bridges(fused, bridges, hashes, slots, graph_query)


def _gated(
    tenant: Tenant,
    lists: list[RankedList],
    known_hashes: dict[int, str],
    fusion: FusionSettings,
    scales: RelevanceScales,
    bridge_ids: set[int],
) -> tuple[list[FusedCandidate], dict[int, str]]:
    """The fused lists, the graph's gated; and every hit's and bridge's content hash."""
    hit_ids = {chunk_id for ranked in lists for chunk_id, _ in ranked.hits} | bridge_ids
    hashes = {**known_hashes, **selectors.content_hashes(hit_ids - known_hashes.keys())}
    present = [
        RankedList(ranked.retriever, ranked.query, ranked.weight, [hit for hit in ranked.hits if hit[0] in hashes])
        for ranked in lists
    ]
    gate = gate_graph(present, settings.GRAPH_FUSION_HEAD, hashes)
    fused = _fused_by(tenant, gate.lists, hashes, fusion, scales)
    if not gate.head:
        return fused, hashes
    # The vote of the graph's first hit: 1 / (k + 1) by rank, 1 on a min-max scale (a graph list has no
    # calibrated relevance, so both score fusions scale it by its own range).
    lift = gate.weight / (fusion.rrf_k + 1) if fusion.fusion == "rrf" else gate.weight
    for candidate in fused:
        if candidate.key in gate.head:
            candidate.fused_score += lift
    return sorted(fused, key=lambda candidate: -candidate.fused_score), hashes  # stable: ties keep the fusion's order


def gate_graph(lists: list[RankedList], head: int, hashes: dict[int, str]) -> GraphGate:
    """Three-way hybrid: the graph reorders and extends what lies below the other legs' heads, never
    the heads, which its noun-based opinion only made worse (docs/BENCHMARKS.md, "Graph retrieval").
    Every passage (by content hash) in another list's top ``head`` scores as if the graph ranked it
    first (``fuse`` adds that vote), so nothing below passes it by the graph's vote alone; the graph's
    own list keeps its other passages. ``head`` 0: no gate."""
    graph = [ranked for ranked in lists if ranked.retriever == "graph"]
    if not head or not graph or len(graph) == len(lists):  # no gate, no graph list, or the graph alone
        return GraphGate(lists, frozenset(), 0.0)
    protected = frozenset(
        hashes[chunk_id] for ranked in lists if ranked.retriever != "graph" for chunk_id, _ in ranked.hits[:head]
    )
    gated = [
        replace(ranked, hits=[hit for hit in ranked.hits if hashes[hit[0]] not in protected])
        if ranked.retriever == "graph"
        else ranked
        for ranked in lists
    ]
    return GraphGate(gated, protected, max(ranked.weight for ranked in graph))


def _fused_by(
    tenant: Tenant, lists: list[RankedList], hashes: dict[int, str], fusion: FusionSettings, scales: RelevanceScales
) -> list[FusedCandidate]:
    if fusion.fusion == "rrf":
        if fusion.leg_weights == "evidence":
            lists = weighted_by_evidence(lists, _first_hit_relevance(tenant, lists, scales))
        return reciprocal_rank_fusion(lists, k=fusion.rrf_k, dedup_key=hashes.__getitem__)
    if fusion.fusion == "minmax":
        return score_fusion(lists, min_max, dedup_key=hashes.__getitem__)
    version_of = _versions_of(tenant, {chunk_id for ranked in lists for chunk_id, _ in ranked.hits}, scales)

    def relevance(ranked: RankedList) -> list[float]:
        """The calibrated relevance of each hit, by the list's retriever; min-max for a retriever without one."""
        if ranked.retriever not in CALIBRATED:
            return min_max(ranked)
        return [
            scales.leg_relevance(ranked, score, version_of[chunk_id]) if chunk_id in version_of else 0.0
            for chunk_id, score in ranked.hits
        ]  # a chunk without a version was deleted since: hydrate drops it

    return score_fusion(lists, relevance, dedup_key=hashes.__getitem__)


def _first_hit_relevance(
    tenant: Tenant, lists: list[RankedList], scales: RelevanceScales
) -> Callable[[RankedList], float | None]:
    """Each list's evidence for per-query weights: its first hit's calibrated relevance; None for a
    retriever without a calibrated scale (the graph), 0.0 for an empty list."""
    version_of = _versions_of(tenant, {ranked.hits[0][0] for ranked in lists if ranked.hits}, scales)

    def evidence(ranked: RankedList) -> float | None:
        if ranked.retriever not in CALIBRATED:
            return None
        if not ranked.hits or ranked.hits[0][0] not in version_of:  # none, or deleted since
            return 0.0
        chunk_id, score = ranked.hits[0]
        return scales.leg_relevance(ranked, score, version_of[chunk_id])

    return evidence


def _versions_of(tenant: Tenant, chunk_ids: set[int], scales: RelevanceScales) -> dict[int, int]:
    """Each chunk's KB version (one searched version needs no lookup); a deleted chunk is absent."""
    if len(scales.version_ids) == 1:
        return dict.fromkeys(chunk_ids, scales.version_ids[0])
    return selectors.chunk_versions(tenant, chunk_ids)
