"""The readiness checks behind ``/ready``: can this process serve searches now?

``/ready`` checks the database, the pgvector extension, Redis, the configured keyword index, that
the default embedder is loaded, and what the wiring layer registers (``register_check``: the graph
store, which this floor cannot import). gunicorn workers load the model before they take requests
(``retrieval.warmup``); under any other server the first probe starts loading it in a background
thread (3-6 s) and ``/ready`` answers 503 "loading" until it is done, so a probe never waits for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import connection

from engines.embedders import EmbeddingError, get_embedder, loaded_embedders
from engines.registry import lexical_index

logger = logging.getLogger(__name__)


class NotReady(Exception):
    """A check that did not fail with an error but cannot pass yet (e.g. the model is loading)."""


class EmbedderWarmUp:
    """Loads the default embedder once in a background thread; a failed load is retried when asked again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._load, name="embedder-warm-up", daemon=True)
                self._thread.start()

    def _load(self) -> None:
        try:
            get_embedder()
        except EmbeddingError as exc:
            self.error = str(exc)
            logger.error("the default embedder cannot be loaded", extra={"detail": self.error})
        else:
            self.error = None


embedder_warm_up = EmbedderWarmUp()


def check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "answers"


def check_pgvector() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        raise NotReady("the vector extension is not installed (run migrate)")
    return f"pgvector {row[0]}"


def check_cache() -> str:
    """Redis (the default cache: results, rate limits, idempotency) takes a write and returns it."""
    key = "health:ready"
    cache.set(key, "ok", timeout=10)
    if cache.get(key) != "ok":
        raise NotReady("Redis did not return what was just written")
    return "Redis answers"


def check_lexical_index() -> str:
    return lexical_index().ping()


def check_embedder() -> str:
    name = settings.EMBEDDING_MODEL
    if name in loaded_embedders():
        return f"{name} loaded"
    embedder_warm_up.start()
    if embedder_warm_up.error:
        raise NotReady(f"{name} cannot be loaded, retrying: {embedder_warm_up.error}")
    raise NotReady(f"{name} is loading")


CHECKS: dict[str, Callable[[], str]] = {
    "database": check_database,
    "pgvector": check_pgvector,
    "cache": check_cache,
    "lexical_index": check_lexical_index,
    "embedder": check_embedder,
}


_OPTIONAL: set[str] = set()  # registered checks whose failure degrades the service instead


def register_check(name: str, check: Callable[[], str], *, required: bool) -> None:
    """Add a readiness check from a floor above (``check`` returns a description or raises)."""
    CHECKS[name] = check
    if not required:
        _OPTIONAL.add(name)


def _required(name: str) -> bool:
    """Searches go on without Redis (uncached, rate limits failing open), so a Redis outage makes the
    service degraded, not unready: taking every worker out of rotation would be the bigger outage.
    Likewise for an optional registered check (the graph store: only opt-in searches use it)."""
    if name in _OPTIONAL:
        return False
    return name != "cache" or not settings.RATE_LIMIT_FAIL_OPEN


def run_checks() -> dict[str, dict[str, object]]:
    results: dict[str, dict[str, object]] = {}
    for name, check in CHECKS.items():
        try:
            ok, message = True, check()
        except NotReady as exc:
            ok, message = False, str(exc)
        except Exception as exc:  # a probe reports every failure instead of raising it
            logger.warning("readiness check failed", extra={"check": name, "detail": str(exc)})
            ok, message = False, f"{type(exc).__name__}: {exc}"
        results[name] = {"ok": ok, "required": _required(name), "message": message}
    return results


def readiness() -> tuple[str, dict[str, dict[str, object]]]:
    """``ready`` (every check passed), ``degraded`` (only optional ones failed) or ``not_ready``."""
    checks = run_checks()
    if all(check["ok"] for check in checks.values()):
        return "ready", checks
    if all(check["ok"] or not check["required"] for check in checks.values()):
        return "degraded", checks
    return "not_ready", checks
