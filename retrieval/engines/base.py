"""Interfaces of the retrieval engines; one module per implementation beside this one."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from retrieval.filters import CompiledFilter


@dataclass(frozen=True)
class SearchScope:
    """What a search may read: one tenant's active KB versions built with one embedding dimension."""

    tenant_id: int
    version_ids: tuple[int, ...]
    embedding_dim: int


@dataclass(frozen=True)
class VectorHit:
    chunk_id: int
    score: float  # cosine similarity, higher is closer


class VectorIndex(ABC):
    @abstractmethod
    def search(
        self, scope: SearchScope, query_vector: np.ndarray, top_k: int, filters: CompiledFilter
    ) -> list[VectorHit]:
        """The ``top_k`` nearest chunks in scope that pass ``filters``, best first."""
