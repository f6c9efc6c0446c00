"""``relevance``: a hit's score in [0, 1] that means the same across the queries of a knowledge base.

Fused RRF values (~0.03) depend on ranks only, so they cannot be thresholded. ``relevance`` is built
from the raw evidence of each retriever instead, each mapped onto [0, 1] by a bound that does not
depend on the other hits of the query:

- **keyword** (BM25): the hit's score divided by the most BM25 could give the query in that KB
  version (each query token's idf at unbounded term frequency, ``LexicalIndex.max_score``; a token
  absent from the KB counts as the rarest possible): 1.0 only for a passage that is all query words,
  about 0.45 for a passage of average length holding each query word once.
- **dense** (cosine): ``(cosine - background) / (1 - background)``, clipped, where ``background`` is
  this query's own "unrelated" level: the 95th percentile of its cosines to a fixed sample of
  ``SAMPLE_SIZE`` passages of the KB version (the same sample every time, re-read after a content
  change: at once while the version holds fewer passages than a sample, at most once per
  ``SAMPLE_REFRESH_S`` after that): 0 means "no closer to the query than 1 passage in 20 of this KB",
  1 an identical vector.
  Queries sit lower than passages do to each other (shorter, and a question rather than a statement),
  so a background of passage-to-passage cosines put every dense hit of a topical KB at 0; each query
  against the same sample is measured on its own scale instead (docs/benchmarks/decisions.md,
  "Dense relevance against the query's own background"). A query no passage is close to keeps its
  best hits near 0, a query with a clear match scores it well above.

- **graph**: the hit's graph score divided by the ranking's ceiling (``graph.ranking``): what a
  passage naming each query entity once would score, a name the query writes like one but no entity
  matched exactly counting as the rarest possible entity. 1.0 for a passage naming every query entity,
  less for one naming some of them or reached through a neighbour (decayed per hop).

A hit's relevance is the strongest of these (a passage strongly matched by any retriever is worth
showing); a reranked hit keeps the same definition, so thresholds do not change with reranking.
This is the raw score that fusion and the per-query weights read; what a hit shows, and a threshold
compares, is it mapped onto the chance of being judged relevant (``retrieval.relevance_calibration``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from cachetools import LRUCache

from retrieval import selectors
from retrieval.fusion_functions import FusedCandidate, RankedList
from retrieval.types import LegResult, ModelGroup

BACKGROUND_QUANTILE = 0.95
SAMPLE_SIZE = 256
SAMPLES_KEPT = 128
# A full sample is re-read at most this often while a version changes (hot updates bump its revision at
# every write): reading it sorts every passage of the version by a hash, a cost linear in its size (52-65 ms
# at 11,800 passages here, so seconds at a million), and a few changed passages hardly move a 95th percentile.
SAMPLE_REFRESH_S = 300.0
# The retrievers whose calibrated relevance weighs their lists in fusion (the graph's list is min-max normalized).
CALIBRATED = ("vector", "bm25")

# version id -> (revision, unit vectors of its sample, monotonic time read): ~0.4 MB each at 384
# dimensions, so the versions searched most recently only; another is read again (one query).
_samples: LRUCache[int, tuple[int, np.ndarray, float]] = LRUCache(maxsize=SAMPLES_KEPT)
_lock = threading.Lock()


def lexical_relevance(score: float, ceiling: float) -> float:
    return _clip(score / ceiling) if ceiling > 0 else 0.0


def dense_relevance(cosine: float, background: float) -> float:
    return _clip((cosine - background) / (1.0 - background)) if background < 1.0 else 0.0


def combined_relevance(dense: float | None, lexical: float | None, graph: float | None = None) -> float:
    """The strongest evidence; 0.0 when no retriever scored the hit."""
    return max((value for value in (dense, lexical, graph) if value is not None), default=0.0)


def query_background(query_vector: np.ndarray, sample: np.ndarray) -> float:
    """``BACKGROUND_QUANTILE`` of the query's cosines to the sample's (unit) vectors; 0.0 without a sample."""
    if not len(sample):
        return 0.0
    unit = query_vector / max(float(np.linalg.norm(query_vector)), 1e-12)
    return float(np.quantile(sample @ unit, BACKGROUND_QUANTILE))


def passage_sample(version_id: int, revision: int) -> np.ndarray:
    """The version's fixed sample of passage vectors, unit length. Re-read when its content changed
    (``revision``): at once while it is smaller than ``SAMPLE_SIZE`` (a small version is cheap to read,
    and a new KB's first passages change its background most), else once ``SAMPLE_REFRESH_S`` have
    passed since the last read."""
    with _lock:
        cached = _samples.get(version_id)  # LRUCache.get counts as a use
    if cached is not None:
        read_revision, unit, read_at = cached
        if read_revision == revision or (len(unit) == SAMPLE_SIZE and time.monotonic() - read_at < SAMPLE_REFRESH_S):
            return unit
    vectors = selectors.embedding_sample(version_id, SAMPLE_SIZE)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12) if len(vectors) else vectors
    with _lock:
        _samples[version_id] = (revision, unit, time.monotonic())
    return unit


def dense_backgrounds(
    legs: Iterable[LegResult], groups: Iterable[ModelGroup], revisions: dict[int, int]
) -> dict[tuple[str, int], float]:
    """(query variant, version id) -> that variant's background in that version, for every dense list."""
    backgrounds = {}
    for leg in legs:
        if leg.retriever != "vector":
            continue
        for ranked, query in zip(leg.lists, leg.queries, strict=True):
            for group in groups:
                vector = (query.vectors or {}).get(group.model_name)
                if vector is None:
                    continue
                for version_id in group.version_ids:
                    sample = passage_sample(version_id, revisions[version_id])
                    backgrounds[(ranked.query, version_id)] = query_background(vector, sample)
    return backgrounds


@dataclass(frozen=True)
class RelevanceScales:
    """What maps one search's raw scores onto ``relevance``: the BM25 ceiling and the dense background
    per (query variant, KB version), the versions searched, and the graph ranking's ceiling per query."""

    ceilings: dict[tuple[str, int], float]
    backgrounds: dict[tuple[str, int], float]
    version_ids: tuple[int, ...]
    graph_ceilings: dict[str, float] = field(default_factory=dict)

    def relevance(self, candidate: FusedCandidate, version_id: int) -> float:
        dense = lexical = None
        if (vector := candidate.retrievers.get("vector")) is not None:
            dense = self.dense(vector.score, vector.query, version_id)
        if (bm25 := candidate.retrievers.get("bm25")) is not None:
            lexical = self.lexical(bm25.score, bm25.query, version_id)
        graph = None
        if (found := candidate.retrievers.get("graph")) is not None:
            graph = lexical_relevance(found.score, self.graph_ceilings.get(found.query, 0.0))
        return combined_relevance(dense, lexical, graph)

    def leg_relevance(self, ranked: RankedList, score: float, version_id: int) -> float:
        """One hit's relevance by its own list's retriever (``vector`` or ``bm25``)."""
        if ranked.retriever == "vector":
            return self.dense(score, ranked.query, version_id)
        return self.lexical(score, ranked.query, version_id)

    def dense(self, cosine: float, query: str, version_id: int) -> float:
        """0.0 for a query variant without a background here (no vector was searched for it)."""
        background = self.backgrounds.get((query, version_id))
        return 0.0 if background is None else dense_relevance(cosine, background)

    def lexical(self, score: float, query: str, version_id: int) -> float:
        return lexical_relevance(score, self.ceilings.get((query, version_id), 0.0))


def _clip(value: float) -> float:
    return min(1.0, max(0.0, float(value)))
