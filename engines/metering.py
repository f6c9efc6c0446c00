"""What one request or task consumed of the engines, tallied as it runs (the design's CostTracker).

The engines report plain units here (tokens, calls, pairs) and know nothing of tenants or prices; the
platform layer (``core.cost``) opens a :class:`Meter` around a request or an ingestion, prices its units
and charges them to a tenant. A contextvar carries the meter, so work run on a pool thread in a copy
of the caller's context (``contextvars.copy_context().run``: the search's pools, the ingestion's, the
deadline's) reports to the same meter. With no meter open, reporting is a no-op.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

LLM_PURPOSES = ("expansion", "triples", "summaries")
# Every unit, in the order responses and the console list them.
KINDS = (
    "embedding_tokens",
    "embedding_calls",
    "rerank_pairs",
    "rerank_calls",
    *(f"llm_{purpose}_{unit}" for purpose in LLM_PURPOSES for unit in ("tokens_in", "tokens_out", "calls")),
    "cpu_ms",
)

_current: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("meter", default=None)
T = TypeVar("T")


class Meter:
    """Units consumed, thread-safe. CPU: the opening thread's CPU time since it opened the meter, plus
    what pool threads running in its context add (:func:`counting_cpu`), less what a nested meter
    charged elsewhere took (:meth:`exclude_cpu`). A model's own intra-op threads are not counted."""

    def __init__(self, tenant_id: int | None = None) -> None:
        self.tenant_id = tenant_id
        self._units: dict[str, float] = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()
        self._thread = threading.get_ident()
        self._cpu_started_s = time.thread_time()
        self._cpu_other_s = 0.0

    def add(self, **units: float) -> None:
        unknown = units.keys() - self._units.keys()
        if unknown:
            raise ValueError(f"unknown cost units: {sorted(unknown)}")
        with self._lock:
            for kind, amount in units.items():
                self._units[kind] += amount

    def add_cpu(self, seconds: float) -> None:
        with self._lock:
            self._cpu_other_s += seconds

    def exclude_cpu(self, seconds: float) -> None:
        self.add_cpu(-seconds)

    def units(self) -> dict[str, float]:
        """Every kind's units so far (``cpu_ms`` up to now when read on the opening thread)."""
        own_s = time.thread_time() - self._cpu_started_s if threading.get_ident() == self._thread else 0.0
        with self._lock:
            units = dict(self._units)
            cpu_s = own_s + self._cpu_other_s
        units["cpu_ms"] = round(max(0.0, cpu_s) * 1000, 3)
        return units


def current() -> Meter | None:
    return _current.get()


def active() -> bool:
    """Whether anyone listens: lets an engine skip counting tokens nobody reads."""
    return _current.get() is not None


def record(**units: float) -> None:
    """Add ``units`` (``embedding_tokens=12, embedding_calls=1``) to the open meter, if any."""
    meter = _current.get()
    if meter is not None:
        meter.add(**units)


def record_llm(purpose: str, tokens_in: int, tokens_out: int) -> None:
    """One chat completion of ``purpose`` (one of ``LLM_PURPOSES``) and its tokens."""
    prefix = f"llm_{purpose}"
    record(**{f"{prefix}_calls": 1, f"{prefix}_tokens_in": tokens_in, f"{prefix}_tokens_out": tokens_out})


@contextmanager
def metered(meter: Meter) -> Iterator[Meter]:
    """``meter`` is the open one inside the block (and in contexts copied from it)."""
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


def counting_cpu(function: Callable[..., T]) -> Callable[..., T]:
    """``function``, whose thread's CPU time goes to the meter open where it was wrapped: for work handed
    to a pool thread (whether or not it runs in a copy of the caller's context)."""
    meter = _current.get()
    if meter is None:
        return function

    def counted(*args: object, **kwargs: object) -> T:
        if meter._thread == threading.get_ident():
            return function(*args, **kwargs)  # the opening thread counts its own CPU
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            meter.add_cpu(time.thread_time() - started)

    return counted
