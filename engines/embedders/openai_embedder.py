from __future__ import annotations

import httpx
import numpy as np

from engines.deadline import DeadlineExceeded, within
from engines.embedders.base import Embedder, EmbeddingError


class OpenAICompatibleEmbedder(Embedder):
    """A remote OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, TEI, llama.cpp, Xinference, ...).

    Token counts for chunking come from a local stand-in tokenizer, since the remote one is unknown.
    Each request ends within ``timeout_s`` in total (connect, send and every read), not per socket read.
    """

    def __init__(self, model_name: str, *, url: str, api_key: str, timeout_s: float, batch_size: int, token_counter):
        self.model_name = model_name
        self._remote_model = model_name.removeprefix("remote:")
        self._url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/embeddings") else "/v1/embeddings")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._batch_size = max(1, batch_size)
        self._count_tokens = token_counter
        self.max_tokens = 510
        self.dimension = int(self.embed_documents(["dimension probe"]).shape[1])

    def count_tokens(self, text: str) -> int:
        return self._count_tokens(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        batches = [texts[i : i + self._batch_size] for i in range(0, len(texts), self._batch_size)]
        vectors = [self._embed_batch(batch) for batch in batches]
        if not vectors:
            return np.zeros((0, self.dimension), dtype=np.float32)
        matrix = np.vstack(vectors).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1, norms)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        try:
            body = {"model": self._remote_model, "input": texts}
            response = within(self._timeout_s, lambda: self._client.post(self._url, json=body))
            response.raise_for_status()
            items = sorted(response.json()["data"], key=lambda item: item["index"])
            matrix = np.array([item["embedding"] for item in items], dtype=np.float32)
        except DeadlineExceeded as exc:
            raise EmbeddingError(f"embedding endpoint {self._url}: {exc}") from exc
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"embedding endpoint {self._url} failed: {exc}") from exc
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise EmbeddingError(f"embedding endpoint {self._url} returned {matrix.shape[0]} vectors for {len(texts)} inputs")
        return matrix
