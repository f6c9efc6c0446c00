"""``relevance``: a hit's score in [0, 1] that means the same across the queries of a knowledge base.

Fused RRF values (~0.03) depend on ranks only, so they cannot be thresholded. ``relevance`` is built
from the raw evidence of each retriever instead, each mapped onto [0, 1] by a bound that does not
depend on the other hits of the query:

- **keyword** (BM25): the hit's score divided by the most BM25 could give the query in that KB
  version (each query token's idf at unbounded term frequency, ``LexicalIndex.max_score``; a token
  absent from the KB counts as the rarest possible): 1.0 only for a passage that is all query words,
  about 0.45 for a passage of average length holding each query word once.
- **dense** (cosine): ``(cosine - background) / (1 - background)``, clipped, where ``background`` is
  the 95th percentile of the cosine between two passages of different documents of the KB version (a
  fixed sample of ``SAMPLE_SIZE`` chunks, computed once per content revision): 0 means "no more similar
  than 1 pair in 20 of unrelated passages of this KB", 1 an identical vector. With a model that does not
  cover the KB's language the background is high and dense relevance low, as it should be.

A hit's relevance is the stronger of the two (a passage strongly matched by either retriever is
worth showing); a reranked hit keeps the same definition, so thresholds do not change with reranking.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from retrieval import selectors
from retrieval.fusion import FusedCandidate, RankedList

BACKGROUND_QUANTILE = 0.95
SAMPLE_SIZE = 256
# The retrievers whose scores ``relevance`` calibrates (the graph's are not: its list is min-max normalized).
CALIBRATED = ("vector", "bm25")

_backgrounds: dict[int, tuple[int, float]] = {}  # version id -> (revision, background cosine)
_lock = threading.Lock()


def lexical_relevance(score: float, ceiling: float) -> float:
    return _clip(score / ceiling) if ceiling > 0 else 0.0


def dense_relevance(cosine: float, background: float) -> float:
    return _clip((cosine - background) / (1.0 - background)) if background < 1.0 else 0.0


def combined_relevance(dense: float | None, lexical: float | None) -> float:
    """The stronger evidence; 0.0 when no retriever scored the hit."""
    return max((value for value in (dense, lexical) if value is not None), default=0.0)


def background_similarity(vectors: np.ndarray, document_ids: np.ndarray) -> float:
    """``BACKGROUND_QUANTILE`` of the cosines between passages of different documents; 0.0 without such a pair."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12) if len(vectors) else vectors
    first, second = np.triu_indices(len(unit), k=1)
    unrelated = document_ids[first] != document_ids[second]
    if not unrelated.any():
        return 0.0
    cosines = np.einsum("ij,ij->i", unit[first[unrelated]], unit[second[unrelated]])
    return float(np.quantile(cosines, BACKGROUND_QUANTILE))


def dense_background(version_id: int, revision: int) -> float:
    """The version's background cosine, recomputed when its content changed (a new revision)."""
    with _lock:
        cached = _backgrounds.get(version_id)
    if cached is not None and cached[0] == revision:
        return cached[1]
    background = background_similarity(*selectors.embedding_sample(version_id, SAMPLE_SIZE))
    with _lock:
        _backgrounds[version_id] = (revision, background)
    return background


@dataclass(frozen=True)
class RelevanceScales:
    """What maps one search's raw scores onto ``relevance``: the BM25 ceiling per (query variant, KB
    version), and each searched version's revision (its dense background's key)."""

    ceilings: dict[tuple[str, int], float]
    revisions: dict[int, int]

    def relevance(self, candidate: FusedCandidate, version_id: int) -> float:
        dense = lexical = None
        if (vector := candidate.retrievers.get("vector")) is not None:
            dense = self.dense(vector.score, version_id)
        if (bm25 := candidate.retrievers.get("bm25")) is not None:
            lexical = self.lexical(bm25.score, bm25.query, version_id)
        return combined_relevance(dense, lexical)

    def leg_relevance(self, ranked: RankedList, score: float, version_id: int) -> float:
        """One hit's relevance by its own list's retriever (``vector`` or ``bm25``)."""
        if ranked.retriever == "vector":
            return self.dense(score, version_id)
        return self.lexical(score, ranked.query, version_id)

    def dense(self, cosine: float, version_id: int) -> float:
        return dense_relevance(cosine, dense_background(version_id, self.revisions[version_id]))

    def lexical(self, score: float, query: str, version_id: int) -> float:
        return lexical_relevance(score, self.ceilings.get((query, version_id), 0.0))


def _clip(value: float) -> float:
    return min(1.0, max(0.0, float(value)))
