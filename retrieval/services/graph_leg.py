"""The graph leg as a ranked list: the graph's ranking (``graph.ranking``) filtered and cut."""

from __future__ import annotations

from django.conf import settings

from graph.ranking import bridges_from, rank_by_graph
from retrieval import selectors
from retrieval.access import readable_to_reader
from retrieval.fusion_functions import RankedList
from retrieval.services.context import SearchContext
from retrieval.types import LegResult


def retrieve_graph(context: SearchContext) -> LegResult:
    """One list for the original query only (synonym groups are already entity aliases); each hit
    keeps the path that found it."""
    query = context.variants[0].text
    ranking = rank_by_graph(
        context.tenant.pk, context.version_ids, query, hops=context.hops, setup=context.graph_setup,
        readable=readable_to_reader(context.tenant, context.compiled.reader),
    )  # fmt: skip
    hits, passing = ranking.hits, {}
    if context.compiled.q and hits:
        passing = selectors.hashes_of_chunks_passing(
            context.tenant, [chunk_id for chunk_id, _ in hits], context.compiled
        )
        hits = [hit for hit in hits if hit[0] in passing]
    hits = hits[: context.depths["graph"]]
    explanations = {chunk_id: ranking.explanation(chunk_id) for chunk_id, _ in hits}
    bridges = []
    if settings.GRAPH_BRIDGE_SLOTS and any(weight > 0 for name, weight in context.weights.items() if name != "graph"):
        anchors = ranking.anchors  # a bridge names its anchor ("via"): one the search may return
        if context.compiled.q:
            anchors = [chunk_id for chunk_id in anchors if chunk_id in passing]
        anchors = anchors[: settings.GRAPH_BRIDGE_ANCHORS]
        bridges = bridges_from(context.tenant.pk, context.version_ids, anchors)
        if context.compiled.q and bridges:
            allowed = selectors.hashes_of_chunks_passing(
                context.tenant, list({bridge.chunk_id for bridge in bridges}), context.compiled
            )
            passing = {**passing, **allowed}
            bridges = [bridge for bridge in bridges if bridge.chunk_id in allowed]
        for bridge in sorted(bridges, key=lambda bridge: -bridge.weight):  # a placed bridge's: its strongest step
            explanations.setdefault(bridge.chunk_id, {}).setdefault(
                "bridge", {"via": bridge.via, "entity": bridge.entity}
            )
    return LegResult(
        "graph", lists=[RankedList("graph", query, context.weights["graph"], hits)], content_hashes=passing,
        notes=ranking.notes, explanations=explanations, bridges=bridges, graph_ceilings={query: ranking.ceiling},
    )  # fmt: skip
