"""The rerank stage: the fused head reordered by the cross-encoder, when the request asks; when it
cannot, what ``RERANK_ON_FAILURE`` and ``RERANK_FALLBACK_ORDER`` say."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings

from core.metrics import record_circuit
from engines.rerankers import get_reranker
from retrieval import selectors
from retrieval.errors import RerankerUnavailable
from retrieval.fusion_functions import FusedCandidate
from retrieval.services.degradation import degradation, degradation_of
from retrieval.services.timings import StageTimings
from retrieval.types import Degradation, Reranked
from tenants.models import Tenant


def rerank(
    tenant: Tenant, query: str, fused: list[FusedCandidate], *, requested: bool, timings: StageTimings
) -> Reranked:
    """The head (``RERANK_TOP_N``) reordered by the reranker; on any failure ``unreranked``."""
    if not requested:
        return Reranked(fused, None, [])
    with timings.stage("rerank"):
        head = fused[: settings.RERANK_TOP_N]
        try:
            reranker = get_reranker()
            if reranker is None:
                message = "reranking was requested but no reranker is configured"
                return unreranked(fused, degradation("rerank", "not_configured", message))
            contents = selectors.chunk_contents(tenant, [candidate.chunk_id for candidate in head])
            try:
                scores = reranker.rerank(query, [contents[candidate.chunk_id] for candidate in head])
            finally:
                record_circuit("reranker", reranker.circuit_open)  # its breaker moves only on a call
            by_chunk = {candidate.chunk_id: score for candidate, score in zip(head, scores, strict=True)}
        except Exception as exc:
            return unreranked(fused, degradation_of("rerank", exc))
    reordered = sorted(head, key=lambda candidate: -by_chunk[candidate.chunk_id]) + fused[len(head) :]
    return Reranked(reordered, by_chunk, [])


def unreranked(fused: list[FusedCandidate], failure: Degradation) -> Reranked:
    """The answer without the reranker, degraded naming the order it has (``RERANK_FALLBACK_ORDER``:
    the fused order, or the dense leg's cosine with the hits it did not find after, in fused order);
    or, with ``RERANK_ON_FAILURE=error``, a 503."""
    if settings.RERANK_ON_FAILURE == "error":
        raise RerankerUnavailable(f"reranking is unavailable: {failure.message}")
    order = settings.RERANK_FALLBACK_ORDER
    if order == "dense":
        dense = [candidate for candidate in fused if candidate.vector_similarity is not None]
        dense.sort(
            key=lambda candidate: -(candidate.vector_similarity or 0.0)
        )  # all set; stable: ties keep the fused order
        fused = dense + [candidate for candidate in fused if candidate.vector_similarity is None]
    return Reranked(fused, None, [replace(failure, fallback=order).as_dict()])
