from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from engines import metering
from engines.embedders.base import Embedder, EmbeddingError

_load_lock = threading.Lock()


class SentenceTransformerEmbedder(Embedder):
    """A local sentence-transformers model, loaded from a folder on disk (never from a hub)."""

    def __init__(self, model_name: str, model_path: Path | str, *, batch_size: int, torch_threads: int):
        with _load_lock:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(torch_threads)
            try:
                self._model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
            except Exception as exc:  # OSError, ValueError, SafetensorError, torch errors: whatever the folder holds
                raise EmbeddingError(f"cannot load embedding model {model_name!r} from {model_path}: {exc}") from exc
        self.model_name = model_name
        dimension, max_seq_length = self._model.get_embedding_dimension(), self._model.max_seq_length
        if dimension is None or max_seq_length is None:
            raise EmbeddingError(f"embedding model {model_name!r} does not state its dimension and input length")
        self.dimension = int(dimension)
        # Two of the model's positions go to [CLS] and [SEP].
        self.max_tokens = int(max_seq_length) - 2
        # A counter of its own: encode() sets truncation on the model's tokenizer, and an ingestion counts
        # the next documents' tokens while it embeds the previous ones in another thread.
        self._counter = Tokenizer.from_str(self._model.tokenizer.backend_tokenizer.to_str())
        self._counter.no_padding()
        self._counter.no_truncation()
        self._batch_size = batch_size

    def count_tokens(self, text: str) -> int:
        return len(self._counter.encode(text, add_special_tokens=False).ids)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        try:
            vectors = self._model.encode(
                texts,
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:  # a torch or tokenizer error
            raise EmbeddingError(f"embedding model {self.model_name!r} failed: {type(exc).__name__}: {exc}") from exc
        if metering.active():  # the tokens the model read, as OnnxEmbedder counts them: [CLS] and [SEP], truncated
            counted = self._counter.encode_batch(texts, add_special_tokens=False)
            tokens = sum(min(len(encoding.ids), self.max_tokens) + 2 for encoding in counted)
            metering.record(embedding_calls=1, embedding_tokens=tokens)
        return vectors.astype(np.float32, copy=False)
