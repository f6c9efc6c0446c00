"""Three-way hybrid's bridge slots: the graph places a few passages inside the top 10.

The gate (``fuse.gate_graph``) keeps the graph below the other legs' heads, where it cannot lift the
passage a multi-hop question needs second: the one holding the answer shares no word with the question,
so neither BM25 nor dense ranks it, and the graph's own list is too noisy to let it vote in the head.
A bridge is more specific: a passage one passage on from a passage that names a query entity and that
the fused ranking already holds in its top ``GRAPH_BRIDGE_HEAD``, through an entity both passages
mention (``graph.bridges_from``). Each bridge scores the sum of its steps' entity idf, each divided by
the rank of the passage it leaves; the best ``GRAPH_BRIDGE_SLOTS`` not ranked above ``GRAPH_BRIDGE_RANK``
already take the ranks from ``GRAPH_BRIDGE_RANK`` on, and the rest move down. A query naming no entity
the graph knows has no anchor and so no bridge: single-passage questions keep their order
(docs/BENCHMARKS.md, "The multi-hop set")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graph.ranking import GraphBridge
from retrieval.fusion_functions import Contribution, FusedCandidate


@dataclass(frozen=True)
class BridgeSlots:
    slots: int  # passages placed at most; 0: none
    rank: int  # the first rank (1-based) they take
    head: int  # the fused ranks whose passages bridges may leave from


def place_bridges(
    fused: list[FusedCandidate],
    bridges: Sequence[GraphBridge],
    hashes: dict[int, str],
    slots: BridgeSlots,
    query: str = "",
) -> list[FusedCandidate]:
    """``fused`` with its best bridges at ranks ``slots.rank`` on (by content hash: a passage already
    ranked above them is no bridge); every other candidate keeps its order."""
    if not slots.slots or not bridges or not fused:
        return fused
    head_rank = {candidate.key: rank for rank, candidate in enumerate(fused[: slots.head], start=1)}
    scores: dict[str, float] = {}
    chunk_of: dict[str, int] = {}
    for bridge in bridges:
        rank = head_rank.get(hashes.get(bridge.via, ""))
        key = hashes.get(bridge.chunk_id)
        if rank is None or key is None:  # not from the head, or deleted since
            continue
        scores[key] = scores.get(key, 0.0) + bridge.weight / rank
        chunk_of[key] = min(chunk_of.get(key, bridge.chunk_id), bridge.chunk_id)
    above = {candidate.key for candidate in fused[: slots.rank - 1]}
    chosen = [key for key in sorted(scores, key=lambda key: (-scores[key], chunk_of[key])) if key not in above]
    chosen = chosen[: slots.slots]
    if not chosen:
        return fused
    by_key = {candidate.key: candidate for candidate in fused}
    rest = [candidate for candidate in fused if candidate.key not in chosen]
    placed = [by_key.get(key) or FusedCandidate(chunk_of[key], key) for key in chosen]
    cut = slots.rank - 1
    # each placed passage's fused score lies between its neighbours', so an order by score keeps it
    high = rest[cut - 1].fused_score if 0 < cut <= len(rest) else (rest[-1].fused_score if rest else 1.0)
    low = rest[cut].fused_score if cut < len(rest) else 0.0
    for number, candidate in enumerate(placed, start=1):
        candidate.fused_score = high - (high - low) * number / (len(placed) + 1)
        candidate.retrievers.setdefault("graph", Contribution(rank=0, score=scores[candidate.key], query=query))
    return [*rest[:cut], *placed, *rest[cut:]]
