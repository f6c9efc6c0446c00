"""The rerank stage: the fused head reordered by the cross-encoder, when the request asks."""

from __future__ import annotations

from django.conf import settings

from core.metrics import record_circuit
from engines.rerankers import get_reranker
from retrieval import selectors
from retrieval.fusion import FusedCandidate
from retrieval.services.degradation import degradation, degradation_of
from retrieval.services.timings import StageTimings
from retrieval.types import Reranked
from tenants.models import Tenant


def rerank(
    tenant: Tenant, query: str, fused: list[FusedCandidate], *, requested: bool, timings: StageTimings
) -> Reranked:
    """The head (``RERANK_TOP_N``) reordered by the reranker; on any failure the fused order, degraded."""
    if not requested:
        return Reranked(fused, None, [])
    with timings.stage("rerank"):
        head = fused[: settings.RERANK_TOP_N]
        try:
            reranker = get_reranker()
            if reranker is None:
                message = "reranking was requested but no reranker is configured"
                return Reranked(fused, None, [degradation("rerank", "not_configured", message).as_dict()])
            contents = selectors.chunk_contents(tenant, [candidate.chunk_id for candidate in head])
            try:
                scores = reranker.rerank(query, [contents[candidate.chunk_id] for candidate in head])
            finally:
                record_circuit("reranker", reranker.circuit_open)  # its breaker moves only on a call
            by_chunk = {candidate.chunk_id: score for candidate, score in zip(head, scores, strict=True)}
        except Exception as exc:
            return Reranked(fused, None, [degradation_of("rerank", exc).as_dict()])
    reordered = sorted(head, key=lambda candidate: -by_chunk[candidate.chunk_id]) + fused[len(head) :]
    return Reranked(reordered, by_chunk, [])
