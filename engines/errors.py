"""The one error type engines raise for a failure the search can degrade around."""

from __future__ import annotations


class ComponentError(Exception):
    """An optional part of a search failed (an engine, an expander, the reranker); ``cause`` is a
    short machine-readable reason for the response's ``degraded`` list, ``message`` the detail."""

    def __init__(self, cause: str, message: str):
        super().__init__(message)
        self.cause = cause
        self.message = message
