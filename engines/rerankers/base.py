from __future__ import annotations

from abc import ABC, abstractmethod

from engines.errors import ComponentError


class RerankError(ComponentError):
    """The reranker gave no usable scores; ``cause`` names why, for the response's ``degraded`` list.

    Causes: ``timeout``, ``rate_limited``, ``server_error``, ``connection_error``, ``malformed_response``,
    ``circuit_open``, ``model_error``.
    """


class Reranker(ABC):
    """Scores (query, passage) pairs with a cross-encoder; higher is more relevant."""

    name: str

    @property
    def circuit_open(self) -> bool:
        """Whether calls are refused at once (a remote endpoint's breaker); a local model has none."""
        return False

    @abstractmethod
    def rerank(self, query: str, passages: list[str]) -> list[float]:
        """One finite score per passage, in the passages' order; raises :class:`RerankError`."""
