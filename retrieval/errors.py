"""Errors of the search domain a client can act on; ``core.errors`` maps them to HTTP."""

from __future__ import annotations

from core.errors import DomainError, UnavailableError


class InvalidFilter(DomainError):
    code = "invalid_filter"


class EmbedderUnavailable(UnavailableError):
    code = "embedder_unavailable"


class LexicalIndexUnavailable(UnavailableError):
    code = "lexical_index_unavailable"


class VectorIndexUnavailable(UnavailableError):
    code = "vector_index_unavailable"


class GraphUnavailable(UnavailableError):
    code = "graph_unavailable"
