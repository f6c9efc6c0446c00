"""Errors of the search domain a client can act on; ``core.errors`` maps them to HTTP."""
from __future__ import annotations

from rest_framework import status

from core.errors import DomainError


class InvalidFilter(DomainError):
    code = "invalid_filter"


class EmbedderUnavailable(DomainError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "embedder_unavailable"


class LexicalIndexUnavailable(DomainError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "lexical_index_unavailable"


class VectorIndexUnavailable(DomainError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "vector_index_unavailable"


class GraphUnavailable(DomainError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "graph_unavailable"
