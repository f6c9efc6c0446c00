"""Interfaces of the retrieval engines; one module per implementation beside this one."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from engines.errors import ComponentError


@dataclass(frozen=True)
class SearchScope:
    """What a search may read: one tenant's active KB versions built with one embedding dimension."""

    tenant_id: int
    version_ids: tuple[int, ...]
    embedding_dim: int


@dataclass(frozen=True)
class SqlFilter:
    """A boolean SQL expression over the chunk table's columns with its parameters, compiled and
    parameterized by the caller; empty: every row in scope passes."""

    sql: str = ""
    params: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.sql)


@dataclass(frozen=True)
class VectorHit:
    chunk_id: int
    score: float  # cosine similarity, higher is closer
    content_hash: str | None = None  # when the index has it at hand; fusion dedups on it


class VectorIndex(ABC):
    def plan(self, scope: SearchScope, filters: SqlFilter) -> object | None:
        """Work that needs no query vector, done while the query embeds and handed to ``search``
        (pgvector sizes the filtered scope to choose between the graph and an exact scan)."""
        return None

    @abstractmethod
    def search(
        self,
        scope: SearchScope,
        query_vector: np.ndarray,
        top_k: int,
        filters: SqlFilter,
        plan: object | None = None,
    ) -> list[VectorHit]:
        """The ``top_k`` nearest chunks in scope that pass ``filters``, best first; ``plan`` is what
        ``plan()`` returned for the same scope and filters (None: the search works it out)."""


@dataclass(frozen=True)
class LexicalDocument:
    """One chunk as a lexical backend stores it: ``text`` is already analyzed (tokens joined by spaces)."""

    chunk_id: int
    doc_id: int
    tenant_id: int
    text: str


@dataclass(frozen=True)
class LexicalHit:
    chunk_id: int
    score: float  # BM25; comparable only within one index


@dataclass(frozen=True)
class IndexState:
    """What built an index: a different analyzer version means the index must be rebuilt."""

    analyzer_version: str
    dictionary_fingerprint: str
    num_docs: int


BM25_K1 = 1.2  # both lexical engines score with k1 = 1.2, b = 0.75


def bm25_ceiling(doc_count: int, doc_frequencies: list[int], *, scale: float) -> float:
    """The most BM25 can give these query tokens: Lucene's idf, ln(1 + (N - df + 0.5) / (df + 0.5)), of
    each token, times ``scale`` (the engine's k1 + 1, or 1 where Lucene dropped it). A token no document
    holds counts as the rarest (df = 0): a passage missing query words is a weaker match, whether or not
    another passage has them."""
    return scale * sum(math.log(1 + (doc_count - df + 0.5) / (df + 0.5)) for df in doc_frequencies)


class LexicalIndexError(ComponentError):
    """The lexical backend cannot serve (down, missing or incompatible index); ``cause`` is for ``degraded``."""


class LexicalIndex(ABC):
    """BM25 over pre-analyzed text, one index per KB version; tenant filters never change scores."""

    name: str

    @abstractmethod
    def replace_documents(
        self,
        version_id: int,
        doc_ids: list[int],
        chunks: list[LexicalDocument],
        *,
        analyzer_version: str,
        dictionary_fingerprint: str,
    ) -> None:
        """Drop every entry of ``doc_ids`` and add ``chunks``, committed together."""

    @abstractmethod
    def delete_documents(self, version_id: int, doc_ids: list[int]) -> None:
        """Drop every entry of ``doc_ids`` (no-op when the version has no index)."""

    @abstractmethod
    def rebuild(
        self, version_id: int, chunks, *, analyzer_version: str, dictionary_fingerprint: str
    ) -> int:
        """Replace the whole index of a version with ``chunks`` (an iterable); returns the count."""

    @abstractmethod
    def drop(self, version_id: int) -> None:
        """Delete a version's index (no-op when absent)."""

    @abstractmethod
    def state(self, version_id: int) -> IndexState | None:
        """None when the version has no index yet."""

    @abstractmethod
    def search(
        self, version_id: int, tenant_id: int, tokens: list[str], limit: int, allowed_chunk_ids: list[int] | None
    ) -> list[LexicalHit]:
        """Best ``limit`` chunks for the query tokens, restricted to ``allowed_chunk_ids`` when given."""

    @abstractmethod
    def max_score(self, version_id: int, tokens: list[str]) -> float:
        """The highest score any chunk of the version could reach for ``tokens`` (as ``search`` scores
        them, a repeated token twice): each token's BM25 weight as its frequency grows without bound,
        summed (``bm25_ceiling``). 0.0 without an index."""

    @abstractmethod
    def ping(self) -> str:
        """A short description of the backend when it can serve (for ``/ready``); raises
        ``LexicalIndexError`` when it cannot. Cheap: readiness probes call it every few seconds."""
