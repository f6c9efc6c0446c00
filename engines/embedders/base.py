from __future__ import annotations

from abc import ABC, abstractmethod
from typing import cast

import numpy as np


class Embedder(ABC):
    """Turns text into unit-length float32 vectors, so cosine similarity is a dot product."""

    model_name: str
    dimension: int
    max_tokens: int  # longest input the model reads; chunks are sized below it
    languages: tuple[str, ...] = ()  # languages the model was trained for; empty means unknown

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens of the model's own tokenizer, without special tokens (chunk sizes are in these)."""

    @abstractmethod
    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """A (len(texts), dimension) float32 array."""

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """A search's query vectors: like :meth:`embed_documents`, but a remote embedder bounds the
        whole call by the search's deadline rather than the ingestion timeout."""
        return self.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return cast(np.ndarray, self.embed_queries([text])[0])


class EmbeddingError(Exception):
    """The embedder could not produce vectors (remote endpoint down, bad answer, model missing or
    failing to load or run); ``cause`` is for a search's ``degraded`` list: ``deadline`` when a remote
    call ran out of time, else ``embedder_unavailable``."""

    def __init__(self, message: str, cause: str = "embedder_unavailable") -> None:
        super().__init__(message)
        self.cause = cause
