"""Fusion of ranked lists: weighted Reciprocal Rank Fusion, or a weighted sum of normalized scores.

- ``rrf`` (the default is ``retrieval.tuning.DEFAULT_FUSION``): ``score(d) = Σ_i w_i / (k + rank_i(d))``; only ranks count, raw
  scores are never compared across lists.
- ``relevance`` and ``minmax``: ``score(d) = Σ_i w_i · s_i(d)``,
  where ``s_i`` is the list's own score mapped onto [0, 1] (a convex combination, as in Bruch et al.,
  "An Analysis of Fusion Functions for Hybrid Retrieval", 2023): by the search's calibrated
  ``relevance`` of each retriever (a bound that does not depend on the other hits,
  ``retrieval.relevance``), or by the list's own minimum and maximum. A list's absent hit adds nothing.

Chunks with the same dedup key (identical content) are one candidate that accumulates every list's
contribution; within a list only its best-ranked copy counts.

Per-query leg weights (``weighted_by_evidence``, RRF's default): RRF alone cannot tell a leg that found a
clear match from one that returned its nearest noise, so each list's weight is multiplied by its own
evidence for this query (the calibrated ``relevance`` of its first hit, squared), and the lists so
weighted share the weight they had together. Still weighted RRF with the same k: only the weights move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

DEFAULT_RRF_K = 60
# The power of a list's first-hit relevance in its per-query weight: the rule's one constant, fitted on half
# of SciFact train (docs/benchmarks/decisions.md, "Per-query leg weights").
EVIDENCE_POWER = 2
# A list's evidence counts as at least this much (not fitted): a leg with none (its first hit no better than
# unrelated passages, or a tiny KB whose calibration says so of every hit) then only fills the tail, behind
# every hit another leg has evidence for, instead of dropping out of the answer.
EVIDENCE_FLOOR = 0.01


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
    """Fuse ranked lists by rank, best first; ties go to the higher vector similarity, then the lower chunk id."""

    def contributions(ranked: RankedList) -> list[float]:
        return [ranked.weight / (k + rank) for rank in range(1, len(ranked.hits) + 1)]

    return _fused(lists, contributions, dedup_key)


def score_fusion(
    lists: list[RankedList],
    normalized: Callable[[RankedList], list[float]],
    *,
    dedup_key: Callable[[int], str] = str,
) -> list[FusedCandidate]:
    """Fuse ranked lists by their weighted scores, each hit's as ``normalized`` maps its list onto [0, 1];
    ties as :func:`reciprocal_rank_fusion`."""
    return _fused(lists, lambda ranked: [ranked.weight * value for value in normalized(ranked)], dedup_key)


def weighted_by_evidence(lists: list[RankedList], evidence: Callable[[RankedList], float | None]) -> list[RankedList]:
    """The lists with per-query weights: each list that ``evidence`` scores (its first hit's calibrated
    relevance in [0, 1], at least ``EVIDENCE_FLOOR``; None: no calibrated scale, weight kept) gets
    ``weight × evidence²``, rescaled so that those lists' weights keep their sum (a third, unscored list
    keeps its share). Equal evidence leaves the weights as they were."""

    def factor(ranked: RankedList) -> float | None:
        if ranked.weight <= 0 or (value := evidence(ranked)) is None:
            return None
        return max(value, EVIDENCE_FLOOR) ** EVIDENCE_POWER

    factors = [factor(ranked) for ranked in lists]
    scored = [(ranked.weight, factor) for ranked, factor in zip(lists, factors) if factor is not None]
    if not scored:
        return lists
    scale = sum(weight for weight, _ in scored) / sum(weight * factor for weight, factor in scored)
    return [
        ranked if factor is None else replace(ranked, weight=ranked.weight * factor * scale)
        for ranked, factor in zip(lists, factors)
    ]


def min_max(ranked: RankedList) -> list[float]:
    """The list's scores from its worst (0) to its best (1); a list of equal scores is all 1."""
    scores = [score for _, score in ranked.hits]
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    return [(score - low) / (high - low) if high > low else 1.0 for score in scores]


def _fused(
    lists: list[RankedList], contributions: Callable[[RankedList], list[float]], dedup_key: Callable[[int], str]
) -> list[FusedCandidate]:
    """Each list's hits add ``contributions(list)`` (one value per hit, in order) to their candidate."""
    candidates: dict[str, FusedCandidate] = {}
    for ranked in lists:
        if ranked.weight <= 0:
            continue
        seen_in_list: set[str] = set()
        values = contributions(ranked)
        for rank, ((chunk_id, score), value) in enumerate(zip(ranked.hits, values, strict=True), start=1):
            key = dedup_key(chunk_id)
            if key in seen_in_list:
                continue
            seen_in_list.add(key)
            candidate = candidates.setdefault(key, FusedCandidate(chunk_id=chunk_id, key=key))
            candidate.fused_score += value
            best = candidate.retrievers.get(ranked.retriever)
            if best is None or rank < best.rank:
                candidate.retrievers[ranked.retriever] = Contribution(rank=rank, score=score, query=ranked.query)
            if ranked.query not in candidate.matched_queries:
                candidate.matched_queries.append(ranked.query)
    return sorted(
        candidates.values(),
        key=lambda c: (
            -c.fused_score,
            -(c.vector_similarity if c.vector_similarity is not None else float("-inf")),
            c.chunk_id,
        ),
    )
