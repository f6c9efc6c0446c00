"""Per-search stage timings: the one place where a stage of the pipeline starts and ends, so it is
also where each stage becomes a trace span (``core.tracing.span``; a shared no-op when tracing is off)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from core.tracing import span

REST = "rest"  # the critical path's untimed work: filters, KB lookup, hydration


class StageTimings:
    """Milliseconds per stage of one search, and its critical path.

    A stage entered twice (the vector leg plans while the query embeds, then searches) adds up.
    Stages timed on other threads (the embedding, the keyword index's search) land here too, so stages
    overlap and their sum exceeds the total. :attr:`critical_path` says where the time of the thread
    that created the timings (the request's) went: its own stages, its waits for a stage running on
    another thread (counted to that stage), and ``rest``; these add up to ``total``.
    """

    def __init__(self, origin: float | None = None) -> None:
        """``origin`` (``time.perf_counter()``): where ``total`` starts, when work before the pipeline
        counts too (the semantic cache's lookup, ``retrieval.cache``); else when its stage is entered."""
        self._origin = origin
        self.milliseconds: dict[str, float] = {}
        self._critical: dict[str, float] = {}
        self._lock = threading.Lock()
        self._thread = threading.get_ident()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = self._origin if name == "total" and self._origin is not None else time.perf_counter()
        try:
            with span(f"search.{name}"):
                yield
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            on_path = name != "total" and threading.get_ident() == self._thread
            with self._lock:
                self.milliseconds[name] = round(self.milliseconds.get(name, 0.0) + elapsed, 3)
                if on_path:
                    self._critical[name] = self._critical.get(name, 0.0) + elapsed

    def waited(self, name: str, since: float) -> None:
        """The request thread waited from ``since`` (``time.perf_counter()``) until now for stage
        ``name``, running on another thread."""
        elapsed = (time.perf_counter() - since) * 1000
        with self._lock:
            self._critical[name] = self._critical.get(name, 0.0) + elapsed

    @property
    def critical_path(self) -> dict[str, float]:
        with self._lock:
            path = {name: round(ms, 3) for name, ms in self._critical.items()}
            if "total" in self.milliseconds:
                rest = self.milliseconds["total"] - sum(self._critical.values())
                path[REST] = round(max(0.0, rest), 3)
        return path
