"""Weighted Reciprocal Rank Fusion: ``score(d) = Σ_i w_i / (k + rank_i(d))``.

Lists come from different retrievers and query variants; raw scores are never compared across them,
only ranks. Chunks with the same dedup key (identical content) are one candidate that accumulates
every list's contribution; within a list only its best-ranked copy counts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_RRF_K = 60


@dataclass(frozen=True)
class RankedList:
    retriever: str  # "vector" or "bm25"
    query: str  # the query variant that produced it
    weight: float  # retriever weight × variant weight
    hits: list[tuple[int, float]]  # (chunk_id, raw score), best first


@dataclass
class Contribution:
    rank: int
    score: float
    query: str


@dataclass
class FusedCandidate:
    chunk_id: int
    key: str
    fused_score: float = 0.0
    retrievers: dict[str, Contribution] = field(default_factory=dict)  # best rank per retriever
    matched_queries: list[str] = field(default_factory=list)

    @property
    def vector_similarity(self) -> float | None:
        contribution = self.retrievers.get("vector")
        return contribution.score if contribution else None


def reciprocal_rank_fusion(
    lists: list[RankedList], *, k: int = DEFAULT_RRF_K, dedup_key: Callable[[int], str] = str
) -> list[FusedCandidate]:
    """Fuse ranked lists, best first; ties go to the higher vector similarity, then the lower chunk id."""
    candidates: dict[str, FusedCandidate] = {}
    for ranked in lists:
        if ranked.weight <= 0:
            continue
        seen_in_list: set[str] = set()
        for rank, (chunk_id, score) in enumerate(ranked.hits, start=1):
            key = dedup_key(chunk_id)
            if key in seen_in_list:
                continue
            seen_in_list.add(key)
            candidate = candidates.setdefault(key, FusedCandidate(chunk_id=chunk_id, key=key))
            candidate.fused_score += ranked.weight / (k + rank)
            best = candidate.retrievers.get(ranked.retriever)
            if best is None or rank < best.rank:
                candidate.retrievers[ranked.retriever] = Contribution(rank=rank, score=score, query=ranked.query)
            if ranked.query not in candidate.matched_queries:
                candidate.matched_queries.append(ranked.query)
    return sorted(
        candidates.values(),
        key=lambda c: (-c.fused_score, -(c.vector_similarity if c.vector_similarity is not None else float("-inf")), c.chunk_id),
    )
