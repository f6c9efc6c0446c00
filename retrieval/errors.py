"""Errors of the search domain a client can act on; ``core.errors`` maps them to HTTP."""

from __future__ import annotations

from core.errors import DomainError, NotFoundError, UnavailableError


class InvalidFilter(DomainError):
    code = "invalid_filter"


class QueryVectorMismatch(DomainError):
    """The caller's query vector is not from the searched versions' model, or not of its dimension."""

    code = "query_vector_mismatch"


class QueryVectorNotApplicable(DomainError):
    """A query vector in a mode with no dense leg (bm25, graph): it would be silently ignored."""

    code = "query_vector_not_applicable"


class EmbedderUnavailable(UnavailableError):
    code = "embedder_unavailable"


class LexicalIndexUnavailable(UnavailableError):
    code = "lexical_index_unavailable"


class VectorIndexUnavailable(UnavailableError):
    code = "vector_index_unavailable"


class RerankerUnavailable(UnavailableError):
    """Reranking failed and ``RERANK_ON_FAILURE`` is ``error``: no unreranked answer instead."""

    code = "reranker_unavailable"


class GraphUnavailable(UnavailableError):
    code = "graph_unavailable"


class PassageNotFound(NotFoundError):
    """A chunk id that is not a passage of the caller's searched versions (another tenant's included)."""

    code = "passage_not_found"


class InvalidQuerySet(DomainError):
    """A judged query, grade or query set file the service cannot read; ``details`` says where."""

    code = "invalid_query_set"


class AccessCheckUnavailable(UnavailableError):
    """The permission check could not run: the search is refused, never answered unfiltered."""

    code = "access_check_unavailable"
