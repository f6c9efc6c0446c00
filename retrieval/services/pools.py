"""The thread pools a search runs its model and keyword-index work on, beside the request thread.

Torch, ONNX Runtime and tantivy release the GIL while they compute; the database work stays on the
request thread and its one connection (a test's transaction included).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from engines.metering import counting_cpu
from retrieval.services.timings import StageTimings

embedding_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")
lexical_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lexical")


def in_pool(pool: ThreadPoolExecutor, timings: StageTimings, stage: str, function: Callable, *args) -> Future:
    """``function(*args)`` on ``pool``, timed as ``stage``, in a copy of the request's context (so its
    log lines carry the request id and its span is the request's child), its CPU time the request's."""

    def staged():
        with timings.stage(stage):
            return function(*args)

    return pool.submit(contextvars.copy_context().run, counting_cpu(staged))
