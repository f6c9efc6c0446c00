"""The search's data: what a caller asks, what it gets back, and what its stages hand each other.

Plain dataclasses with no behaviour of their own, so serializers, the cache and the evaluation can
use them without importing the pipeline (``retrieval.services.search``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from core.errors import DomainError
from engines.analysis import Analyzer
from engines.base import LexicalHit
from engines.lexical_filter import LexicalFilter
from retrieval.expansion import ExpansionOptions
from retrieval.expansion.base import QueryVariant
from retrieval.fusion_functions import FusedCandidate, RankedList

if TYPE_CHECKING:
    from graph.ranking import GraphBridge

MODES = ("vector", "bm25", "hybrid", "graph")
RETRIEVERS = ("vector", "bm25", "graph")


@dataclass(frozen=True)
class QueryVector:
    """The caller's own embedding of ``query``: the dense leg searches it instead of embedding the query."""

    model: str  # the embedding model it came from; must be the searched KB versions' model
    values: tuple[float, ...]


@dataclass
class SearchRequest:
    query: str
    mode: str = "hybrid"
    top_k: int = 10
    kb_ids: list[int] | None = None
    filters: dict[str, Any] | None = None
    weights: dict[str, float] | None = None
    candidates: int | dict[str, int] | None = None  # one depth for every leg, or per leg ({"vector": 80})
    fusion: str | None = None  # "rrf", "relevance" or "minmax" (retrieval.fusion_functions)
    leg_weights: str | None = (
        None  # RRF: "evidence" (per query, retrieval.fusion_functions.weighted_by_evidence) or "fixed"
    )
    leg_candidates: str | None = None  # "union" (each leg ranks every leg's candidates) or "own"
    rrf_k: int | None = None
    rerank: bool = False
    graph: bool = False  # hybrid: fuse the graph leg too (so does a graph weight > 0)
    hops: int | None = None  # the graph leg's neighbourhood; None: GRAPH_HOPS
    score_threshold: float = 0.0  # hits with a lower ``relevance`` are dropped
    # None: the searched KBs' search settings, else the service's (retrieval.tuning)
    dense_weight_floor: float | None = None
    aggregate: str | None = None
    group_by: str | None = None
    feedback_docs: int | None = None  # RM3 on the BM25 leg (retrieval.expansion.rm3); 0: off
    feedback_terms: int | None = None
    feedback_query_weight: float | None = None
    expand: ExpansionOptions = field(
        default_factory=lambda: ExpansionOptions(synonyms=False, spelling=False, llm=False)
    )
    query_vector: QueryVector | None = None
    # Who searches (docs/permissions.md): the reader's principals, sorted, "*" among them (ApiKey.reader,
    # through retrieval.access.key_access; never a body's "principals" as given); the default reads only
    # what everyone may. ``reachable_kb_ids``: a KB-limited key's KBs (None: all).
    reader: tuple[str, ...] = ("*",)
    reachable_kb_ids: tuple[int, ...] | None = None


@dataclass
class SearchHit:
    chunk_id: int
    doc_id: int
    kb_id: int
    content: str
    score: float
    source: str
    rank: int
    title: str
    source_uri: str
    doc_type: str
    metadata: dict[str, Any]
    relevance: float = 0.0  # in [0, 1], comparable across queries of a KB (retrieval.relevance)
    section: str | None = None  # the heading path to the chunk ("Setup > Wi-Fi"); None: no headings above it
    fused_score: float | None = None
    rerank_score: float | None = None
    retrievers: dict[str, Any] = field(default_factory=dict)
    matched_queries: list[str] = field(default_factory=list)
    document_score: float | None = None  # its document's aggregated score (retrieval.grouping); None: not aggregated
    passages: list[dict[str, Any]] | None = None  # group_by "document": the document's other matched chunks; else None
    parent_id: int | None = None  # a parent_child version's hit: its parent passage (the content shown); else None
    # parent_child: the children of that parent that matched ({"chunk_id", "ordinal", "retrievers"}); else None
    children: list[dict[str, Any]] | None = None


@dataclass
class SearchResponse:
    results: list[SearchHit]
    mode: str
    queries: list[dict[str, Any]]
    weights: dict[str, float]
    reranked: bool
    degraded: list[dict[str, Any]]
    notes: list[str]
    candidates: dict[str, int]
    timings_ms: dict[str, float]
    # Adjustments a client or the console acts on, by a stable ``code`` (``Notice``); each one's message
    # is in ``notes`` too.
    notices: list[dict[str, Any]] = field(default_factory=list)
    # Where the request thread's time went (retrieval.services.timings.StageTimings.critical_path):
    # stages run concurrently, so timings_ms no longer add up to the total; these do.
    critical_path_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Shallow: fields and hits are shared, not copied (``asdict`` deep-copies some 600 objects
        a response, a quarter of the cost of answering from the cache)."""
        return {**vars(self), "results": [dict(vars(hit)) for hit in self.results]}


# --- between stages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelGroup:
    """KB versions searched together: same embedding model, so one query vector serves them."""

    model_name: str
    dimension: int
    languages: tuple[str, ...]
    version_ids: tuple[int, ...]
    revisions: tuple[int, ...]  # of each version, in the same order


@dataclass(frozen=True)
class Degradation:
    """An optional stage that failed: the search answers without it and names it in ``degraded``."""

    stage: str  # "expand", "bm25", "feedback", "vector", "graph", "union", "group" or "rerank"
    cause: str  # short and machine-readable: the failing component's own cause, else a generic one
    message: str
    fallback: str | None = None  # rerank: the order answered instead ("fused" or "dense", RERANK_FALLBACK_ORDER)

    def as_dict(self) -> dict[str, Any]:
        entry = {"stage": self.stage, "cause": self.cause, "message": self.message}
        return entry if self.fallback is None else {**entry, "fallback": self.fallback}


@dataclass(frozen=True)
class Expansion:
    variants: list[QueryVariant]  # the original query first
    degraded: list[dict[str, Any]]


@dataclass(frozen=True)
class Notice:
    """A plan's adjustment that is not a failure (the search ran as planned), named by a stable ``code``
    a client or the console can match instead of the wording of its note."""

    stage: str  # the retriever or stage adjusted, as in ``degraded``
    code: str  # e.g. "dense_skipped_language", "dense_weighted_language"
    message: str  # the note's text, the same sentence as in ``notes``

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class Weights:
    by_retriever: dict[str, float]  # 0: the retriever does not run
    notes: list[str]
    notices: list[Notice] = field(default_factory=list)


@dataclass(frozen=True)
class ListQuery:
    """What scored one ranked list, so that its leg can score passages another leg found: the BM25
    tokens and their weights (None: 1 each), or the query's vector per embedding model."""

    tokens: list[str] | None = None
    token_weights: list[float] | None = None
    vectors: dict[str, np.ndarray] | None = None


@dataclass(frozen=True)
class LegResult:
    """What one retriever of a search returned: its ranked lists (one per query variant), the
    content hashes it already knows for its hits, and notes; or why it failed, and the error to
    raise if no other leg answers."""

    retriever: str
    lists: list[RankedList] = field(default_factory=list)
    queries: list[ListQuery] = field(default_factory=list)  # one per list (BM25 and dense legs)
    content_hashes: dict[int, str] = field(default_factory=dict)
    ceilings: dict[tuple[str, int], float] = field(default_factory=dict)  # (query, version id) -> max BM25
    graph_ceilings: dict[str, float] = field(default_factory=dict)  # graph: query -> its ranking's ceiling
    notes: list[str] = field(default_factory=list)
    explanations: dict[int, dict[str, Any]] = field(
        default_factory=dict
    )  # chunk id -> why it was found (graph: the path)
    bridges: list[GraphBridge] = field(default_factory=list)  # graph: passages one passage on from the query's
    degraded: list[Degradation] = field(default_factory=list)  # optional parts it answered without (feedback)
    failure: Degradation | None = None
    unavailable: DomainError | None = None


@dataclass(frozen=True)
class Reranked:
    candidates: list[FusedCandidate]  # the reranked head first
    scores: dict[int, float] | None  # chunk id -> rerank score; None: not reranked
    degraded: list[dict[str, Any]]


@dataclass(frozen=True)
class LexicalQuery:
    """What the BM25 leg prepares before the keyword index searches: the tenant's analyzer, and with
    filters either the filter the index applies itself (``field_filter``, when its entries carry the
    business fields) or the chunk ids the index may return (None: too many, so the index over-fetches
    to ``depth``); without ids, its hits are checked against the database after."""

    analyzer: Analyzer
    allowed: list[int] | None
    depth: int
    field_filter: LexicalFilter | None = None


@dataclass(frozen=True)
class LexicalHits:
    """The keyword index's answer before the database check: hits per query variant (best first), the
    variant's analyzed tokens, the BM25 ceiling per (query variant, KB version), and notes on the index."""

    hits: list[list[LexicalHit]]
    tokens: list[list[str]]
    ceilings: dict[tuple[str, int], float]
    notes: list[str]
