"""Document-aware ranking as stages (the rules are ``retrieval.grouping``): the chunks of one document
counted together before reranking, and ``top_k`` cut as chunks or as one hit per document after."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrieval import selectors
from retrieval.fusion_functions import FusedCandidate
from retrieval.grouping import Grouped, aggregate, group_by_document
from retrieval.services.degradation import degradation_of
from retrieval.services.timings import StageTimings
from retrieval.tuning import FusionSettings
from tenants.models import Tenant


@dataclass(frozen=True)
class DocumentOrder:
    candidates: list[FusedCandidate]
    scores: dict[int, float]  # chunk id -> its document's aggregated score; empty: not aggregated
    document_of: dict[int, int]  # chunk id -> document id; empty: not looked up
    degraded: list[dict[str, Any]]


def order_by_document(
    tenant: Tenant, fused: list[FusedCandidate], fusion: FusionSettings, timings: StageTimings
) -> DocumentOrder:
    """The candidates by their document's score; documents are looked up only when the search
    aggregates or groups. On any failure the fused order, degraded."""
    if fusion.aggregate == "none" and fusion.group_by == "chunk":
        return DocumentOrder(fused, {}, {}, [])
    with timings.stage("group"):
        try:
            document_of = selectors.document_ids(tenant, [candidate.chunk_id for candidate in fused])
            ranked, scores = aggregate(fused, document_of, fusion.aggregate)
        except Exception as exc:
            return DocumentOrder(fused, {}, {}, [degradation_of("group", exc).as_dict()])
    return DocumentOrder(ranked, scores, document_of, [])


def top_k_hits(candidates: list[FusedCandidate], top_k: int, group_by: str, document_of: dict[int, int]) -> Grouped:
    """The ``top_k`` hits: chunks, or (``group_by`` document) each document's best chunk and its passages."""
    if group_by == "document":
        grouped = group_by_document(candidates, document_of)
        return Grouped(grouped.candidates[:top_k], grouped.passages)
    return Grouped(candidates[:top_k], {})
