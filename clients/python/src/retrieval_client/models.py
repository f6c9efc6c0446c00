"""Typed results: the service's JSON answer as dataclasses. Unknown fields are ignored, so a newer
service (more fields) does not break an older client."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def _known(cls: type[Any], data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in names}


@dataclass(frozen=True)
class Contribution:
    """One retriever's part in a hit: its rank and raw score in that list, the query variant used, and
    whatever else that retriever explains (the graph leg: ``entities``, ``path``, ``hops``)."""

    rank: int
    score: float
    query: str
    explanation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    doc_id: int
    kb_id: int
    content: str
    score: float
    rank: int
    title: str = ""
    source_uri: str = ""
    doc_type: str = ""
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    section: str | None = None  # the headings above the chunk (Markdown, HTML), outermost first, joined by " > "
    relevance: float | None = None  # 0 to 1, comparable across queries (None from a server without it)
    fused_score: float | None = None
    rerank_score: float | None = None
    retrievers: dict[str, Contribution] = field(default_factory=dict)
    matched_queries: list[str] = field(default_factory=list)
    document_score: float | None = None  # its document's aggregated score (``aggregate`` max or sum)
    passages: list[dict[str, Any]] | None = None  # ``group_by="document"``: the document's other matched chunks
    # A parent_child knowledge base's hit: the parent passage returned as ``content``, and its children that
    # matched ({"chunk_id", "ordinal", "retrievers": {name: {"rank", "score"}}}); None for plain chunks.
    parent_id: int | None = None
    children: list[dict[str, Any]] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchHit:
        values = _known(cls, data)
        values["retrievers"] = {
            name: Contribution(
                part["rank"],
                part["score"],
                part["query"],
                {key: value for key, value in part.items() if key not in ("rank", "score", "query")},
            )
            for name, part in (data.get("retrievers") or {}).items()
        }
        return cls(**values)

    def citation_metadata(self) -> dict[str, Any]:
        """What a framework's document or node carries of the hit: its own metadata, then its ids, where
        it is from, its scores and why it ranked (the LangChain and LlamaIndex retrievers share it)."""
        return {
            **self.metadata,
            "chunk_id": self.chunk_id,
            "doc_id": self.doc_id,
            "kb_id": self.kb_id,
            "title": self.title,
            "source": self.source_uri,
            "section": self.section,
            "doc_type": self.doc_type,
            "rank": self.rank,
            "score": self.score,
            "relevance": self.relevance,
            "fused_score": self.fused_score,
            "rerank_score": self.rerank_score,
            "explanation": {
                "retrievers": {name: vars(part) for name, part in self.retrievers.items()},
                "matched_queries": list(self.matched_queries),
            },
        }


@dataclass(frozen=True)
class QueryVariant:
    text: str
    weight: float
    origin: str


@dataclass(frozen=True)
class Degradation:
    """A part of the search that failed without failing it (e.g. the reranker timed out)."""

    stage: str
    cause: str
    message: str = ""


@dataclass(frozen=True)
class Notice:
    """An adjustment of the search's plan, by a stable code (e.g. ``dense_skipped_language``); not a failure."""

    stage: str
    code: str
    message: str = ""


@dataclass(frozen=True)
class SearchResult:
    results: list[SearchHit]
    mode: str
    total: int = 0
    queries: list[QueryVariant] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    reranked: bool = False
    cached: bool | str = False  # "semantic": the answer of a close enough earlier query, named in ``cache``
    cache: dict[str, Any] | None = None  # a semantic hit: {"kind", "query", "cosine"}
    degraded: list[Degradation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)  # units, amount, amounts, currency (docs/cost.md)
    candidates: dict[str, int] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    critical_path_ms: dict[str, float] = field(default_factory=dict)
    latency_ms: float = 0.0
    request_id: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        values = _known(cls, data)
        values["results"] = [SearchHit.from_dict(hit) for hit in data.get("results") or []]
        values["queries"] = [QueryVariant(**_known(QueryVariant, q)) for q in data.get("queries") or []]
        values["degraded"] = [Degradation(**_known(Degradation, d)) for d in data.get("degraded") or []]
        values["notices"] = [Notice(**_known(Notice, n)) for n in data.get("notices") or []]
        return cls(**values)
