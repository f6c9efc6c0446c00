"""The thread pools a search runs its model and keyword-index work on, beside the request thread, and
its query variants on, beside each other.

Torch, ONNX Runtime and tantivy release the GIL while they compute, psycopg while PostgreSQL answers.
A leg's database work stays on the request thread and its connection, but for its variants after the
first (``per_variant``): those run on the variant pool, each thread on its own connection, except when
the request thread is inside a transaction (a test's included), whose rows no other connection sees.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from django.conf import settings
from django.db import close_old_connections, connection

from engines.errors import ComponentError
from engines.metering import counting_cpu
from retrieval.services.timings import StageTimings

T = TypeVar("T")
R = TypeVar("R")

embedding_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")
lexical_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lexical")
# Each thread keeps at most one database connection (DB_CONN_MAX_AGE applies, as to a request's).
variant_pool = ThreadPoolExecutor(max_workers=settings.SEARCH_VARIANT_THREADS, thread_name_prefix="variant")


def in_pool(
    pool: ThreadPoolExecutor, timings: StageTimings, stage: str, function: Callable[..., T], *args: Any
) -> Future[T]:
    """``function(*args)`` on ``pool``, timed as ``stage``, in a copy of the request's context (so its
    log lines carry the request id and its span is the request's child), its CPU time the request's."""

    def staged() -> T:
        with timings.stage(stage):
            return function(*args)

    return pool.submit(contextvars.copy_context().run, counting_cpu(staged))


def per_variant(function: Callable[[T], R], items: Sequence[T], *, database: bool) -> list[R]:
    """``function(item)`` for every item (one per query variant) at once: the calling thread runs the
    first, the variant pool the others. The results come in the items' order whatever order they
    finish in, so fusion sees the same lists as a sequential run; the first item (in that order) that
    raised raises here, once all have ended. ``database``: ``function`` reads the database, so it runs
    one item after another when the calling thread is inside a transaction. The others not done
    within ``SEARCH_DEADLINE_MS`` raise a ``deadline`` ``ComponentError`` (their leg degrades)."""
    if len(items) < 2 or (database and connection.in_atomic_block):
        return [function(item) for item in items]
    task = _on_own_connection if database else _call
    # Each in a copy of the request's context: log lines keep the request id, spans their parent.
    futures = [
        variant_pool.submit(contextvars.copy_context().run, counting_cpu(task), function, item) for item in items[1:]
    ]
    outcomes: list[tuple[R | None, Exception | None]] = [_outcome(function, items[0])]
    ends_at = time.monotonic() + settings.SEARCH_DEADLINE_MS / 1000
    for future in futures:
        try:
            outcomes.append((future.result(timeout=max(0.0, ends_at - time.monotonic())), None))
        except FutureTimeout:
            for pending in futures:
                pending.cancel()  # not started yet: never start them
            raise ComponentError(
                "deadline", f"query variants not searched within SEARCH_DEADLINE_MS ({settings.SEARCH_DEADLINE_MS} ms)"
            ) from None
        except Exception as exc:
            outcomes.append((None, exc))
    for _, error in outcomes:
        if error is not None:
            raise error
    return [result for result, _ in outcomes]  # type: ignore[misc]  # none failed


def _outcome(function: Callable[[T], R], item: T) -> tuple[R | None, Exception | None]:
    try:
        return function(item), None
    except Exception as exc:
        return None, exc


def _call(function: Callable[[T], R], item: T) -> R:
    return function(item)


def _on_own_connection(function: Callable[[T], R], item: T) -> R:
    """On a variant thread: its connection checked before and after, as Django does around a request
    (a broken one or one older than DB_CONN_MAX_AGE is closed; the next query opens a new one)."""
    close_old_connections()
    try:
        return function(item)
    finally:
        close_old_connections()
