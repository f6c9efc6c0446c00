from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import numpy as np

from engines import metering
from engines.deadline import DeadlineExceeded, capped_timeout, within
from engines.embedders.base import Embedder, EmbeddingError


class OpenAICompatibleEmbedder(Embedder):
    """A remote OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM, TEI, llama.cpp, Xinference, ...).

    Token counts for chunking come from a local stand-in tokenizer, since the remote one is unknown.
    Each request ends within ``timeout_s`` in total (connect, send and every read), not per socket read;
    a search's query embedding (:meth:`embed_queries`) ends within ``query_deadline_s`` (the search's
    ``SEARCH_DEADLINE_MS``) when that is shorter, all its batches together, and a miss is an
    :class:`EmbeddingError` with cause ``deadline``.
    """

    def __init__(
        self,
        model_name: str,
        *,
        url: str,
        api_key: str,
        timeout_s: float,
        batch_size: int,
        token_counter: Callable[[str], int],
        query_deadline_s: float | None = None,
    ):
        self.model_name = model_name
        self._remote_model = model_name.removeprefix("remote:")
        self._url = url.rstrip("/") + ("" if url.rstrip("/").endswith("/embeddings") else "/v1/embeddings")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        self._query_deadline_s = capped_timeout(timeout_s, query_deadline_s or timeout_s)
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._batch_size = max(1, batch_size)
        self._count_tokens = token_counter
        self.max_tokens = 510
        self.dimension = int(self.embed_documents(["dimension probe"]).shape[1])

    def count_tokens(self, text: str) -> int:
        return self._count_tokens(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, budget_s=None)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, budget_s=self._query_deadline_s)

    def _embed(self, texts: list[str], *, budget_s: float | None) -> np.ndarray:
        """Each batch within ``timeout_s``; with a ``budget_s``, all of them within it too."""
        ends_at = None if budget_s is None else time.monotonic() + budget_s
        vectors = []
        for start in range(0, len(texts), self._batch_size):
            left_s = self._timeout_s if ends_at is None else min(self._timeout_s, ends_at - time.monotonic())
            if left_s <= 0:
                raise EmbeddingError(f"embedding endpoint {self._url}: out of the {budget_s:g} s budget", "deadline")
            vectors.append(self._embed_batch(texts[start : start + self._batch_size], left_s))
        if not vectors:
            return np.zeros((0, self.dimension), dtype=np.float32)
        matrix = np.vstack(vectors).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1, norms)

    def _embed_batch(self, texts: list[str], deadline_s: float) -> np.ndarray:
        try:
            body = {"model": self._remote_model, "input": texts}
            # Each socket operation is capped by the deadline too, so an abandoned call ends soon after.
            response = within(deadline_s, lambda: self._client.post(self._url, json=body, timeout=deadline_s))
            response.raise_for_status()
            answer = response.json()
            items = sorted(answer["data"], key=lambda item: item["index"])
            matrix = np.array([item["embedding"] for item in items], dtype=np.float32)
        except DeadlineExceeded as exc:
            raise EmbeddingError(f"embedding endpoint {self._url}: {exc}", "deadline") from exc
        except httpx.TimeoutException as exc:  # a socket timeout shortened to the deadline is that deadline
            if deadline_s < self._timeout_s:
                raise EmbeddingError(
                    f"embedding endpoint {self._url}: no answer within the deadline", "deadline"
                ) from exc
            raise EmbeddingError(f"embedding endpoint {self._url} failed: {exc}") from exc
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"embedding endpoint {self._url} failed: {exc}") from exc
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise EmbeddingError(
                f"embedding endpoint {self._url} returned {matrix.shape[0]} vectors for {len(texts)} inputs"
            )
        if metering.active():
            metering.record(embedding_calls=1, embedding_tokens=self._billed_tokens(answer, texts))
        return matrix

    def _billed_tokens(self, answer: object, texts: list[str]) -> int:
        """The tokens the server says it read (``usage``), else the stand-in tokenizer's count."""
        usage = answer.get("usage") if isinstance(answer, dict) else None
        tokens = usage.get("prompt_tokens", usage.get("total_tokens")) if isinstance(usage, dict) else None
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
            return tokens
        return sum(self._count_tokens(text) for text in texts)
