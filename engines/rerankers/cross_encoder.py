from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from engines import metering
from engines.rerankers.base import Reranker, RerankError

# Subword tokens average about four characters of English and one of Chinese, so this many characters
# per token always covers the token limit; cutting earlier only saves tokenizer time on huge passages.
CHARS_PER_TOKEN = 4


class CrossEncoderReranker(Reranker):
    """A local sentence-transformers CrossEncoder, loaded once from a folder on disk (never from a hub).

    ``num_labels=None`` lets a trained reranker's config decide; pass 1 to put an untrained one-score
    head on a plain encoder folder (testing the code path and its speed only: its scores are noise).
    """

    def __init__(
        self,
        model_path: str,
        *,
        max_tokens: int = 256,
        batch_size: int = 16,
        num_labels: int | None = None,
        torch_threads: int | None = None,
    ):
        self.name = f"cross-encoder:{Path(model_path).name}"
        self._max_chars = CHARS_PER_TOKEN * max_tokens
        self._batch_size = batch_size
        # One forward pass at a time: two would only fight over the same cores, and a shared fast
        # tokenizer is not safe to call from several threads at once.
        self._lock = threading.Lock()
        try:
            import torch
            from sentence_transformers import CrossEncoder

            if torch_threads:
                # Process-wide, like the embedder's: MKL_NUM_THREADS=1 would otherwise leave torch one core.
                torch.set_num_threads(torch_threads)
            self._model = CrossEncoder(
                model_path, num_labels=num_labels, max_length=max_tokens, device="cpu", local_files_only=True
            )
        except Exception as exc:
            raise RerankError("model_error", f"cannot load cross-encoder from {model_path}: {exc}") from exc

    def rerank(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        pairs = [(query[: self._max_chars], passage[: self._max_chars]) for passage in passages]
        try:
            with self._lock:
                scores = self._model.predict(
                    pairs, batch_size=self._batch_size, show_progress_bar=False, convert_to_numpy=True
                )
            scores = np.asarray(scores, dtype=np.float64)
        except Exception as exc:
            raise RerankError("model_error", f"{self.name} failed: {exc}") from exc
        if scores.shape != (len(passages),):
            raise RerankError("model_error", f"{self.name} gave scores of shape {scores.shape}, not one per passage")
        if not np.isfinite(scores).all():
            raise RerankError("malformed_response", f"{self.name} gave non-finite scores")
        metering.record(rerank_calls=1, rerank_pairs=len(passages))
        result: list[float] = scores.tolist()
        return result
