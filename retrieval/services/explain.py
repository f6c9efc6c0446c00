"""The explain stage: the response's account of how the search ran, gathered from every stage's output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrieval.fusion_functions import FusedCandidate
from retrieval.services.document_order import DocumentOrder
from retrieval.services.legs import Retrieved
from retrieval.services.union import UnionScored
from retrieval.tuning import FusionSettings
from retrieval.types import RETRIEVERS, Expansion, Reranked, Weights


@dataclass(frozen=True)
class Explanation:
    queries: list[dict[str, Any]]  # the variants searched, the original first
    degraded: list[dict[str, Any]]  # the optional stages that failed, in the pipeline's order
    notes: list[str]
    notices: list[dict[str, Any]]  # the adjustments named by a code (``retrieval.types.Notice``)
    candidates: dict[str, int]  # retriever -> distinct chunks it found; "fused": after deduplication


def explain(
    *,
    fusion: FusionSettings,
    expansion: Expansion,
    weights: Weights,
    retrieved: Retrieved,
    union: UnionScored,
    fused: list[FusedCandidate],
    documents: DocumentOrder,
    reranked: Reranked,
) -> Explanation:
    legs = union.legs
    return Explanation(
        queries=[{"text": v.text, "weight": v.weight, "origin": v.origin} for v in expansion.variants],
        degraded=[
            *expansion.degraded,
            *(leg.failure.as_dict() for leg in legs if leg.failure),
            *union.degraded,
            *(degradation.as_dict() for leg in legs for degradation in leg.degraded),
            *documents.degraded,
            *reranked.degraded,
        ],
        notes=[*fusion.notes, *_depth_notes(fusion), *weights.notes, *(note for leg in legs for note in leg.notes)],
        notices=[notice.as_dict() for notice in weights.notices],
        candidates={**_found(retrieved), "fused": len(fused)},
    )


def _found(retrieved: Retrieved) -> dict[str, int]:
    """The distinct chunks each retriever found itself (before the union scored the others')."""
    chunk_ids: dict[str, set[int]] = {}
    for leg in retrieved.legs:
        for ranked in leg.lists:
            chunk_ids.setdefault(ranked.retriever, set()).update(chunk_id for chunk_id, _ in ranked.hits)
    return {retriever: len(ids) for retriever, ids in chunk_ids.items()}


def _depth_notes(fusion: FusionSettings) -> list[str]:
    """The request's per-leg candidates, as each leg ran them (below top_k: raised to it)."""
    if not fusion.leg_depths:
        return []
    depths = ", ".join(f"{leg} {fusion.depth(leg)}" for leg in RETRIEVERS if leg in fusion.leg_depths)
    return [f"candidates per leg: {depths}; other legs {fusion.candidates}"]
