"""Per-search stage timings: the one place where a stage of the pipeline starts and ends, so it is
also where each stage becomes a trace span (``core.tracing.span``; a shared no-op when tracing is off)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from core.tracing import span


class StageTimings:
    """Milliseconds per stage of one search. A stage entered twice (the vector leg plans while the
    query embeds, then searches) adds up; the embedding thread times its stage here too."""

    def __init__(self) -> None:
        self.milliseconds: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            with span(f"search.{name}"):
                yield
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            with self._lock:
                self.milliseconds[name] = round(self.milliseconds.get(name, 0.0) + elapsed, 3)
