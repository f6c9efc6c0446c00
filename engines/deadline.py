"""A total deadline for a remote call: connect, send, every read and every retry together.

HTTP clients bound each socket operation, not the whole call: a peer that drips one byte a second
resets a 2 s read timeout forever (a search was held 214 s). ``within`` runs the call on a helper
thread and stops waiting at the deadline; the caller turns :class:`DeadlineExceeded` into its own
component error with cause ``deadline``. The abandoned call still ends by itself (its per-operation
timeouts are capped by the same budget, see :func:`capped_timeout`), and at most ``MAX_PENDING_CALLS``
run at once, so a hung peer cannot pile up threads: further calls wait in the queue and miss their
deadline instead.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

T = TypeVar("T")

MAX_PENDING_CALLS = 16
_calls = ThreadPoolExecutor(max_workers=MAX_PENDING_CALLS, thread_name_prefix="deadline")


class DeadlineExceeded(Exception):
    def __init__(self, deadline_s: float):
        super().__init__(f"no answer within the {deadline_s:g} s deadline")
        self.deadline_s = deadline_s


def within(deadline_s: float, call: Callable[[], T]) -> T:
    """``call()``'s result or exception, or :class:`DeadlineExceeded` once ``deadline_s`` has passed."""
    started = time.monotonic()
    future = _calls.submit(contextvars.copy_context().run, call)  # log lines keep the request id
    try:
        return future.result(timeout=deadline_s)
    except FutureTimeout:
        future.cancel()  # not started yet (the pool is busy): never start it
        raise DeadlineExceeded(deadline_s) from None
    except Exception as exc:
        # A per-operation timeout capped at the deadline fires at the same instant as the wait above;
        # whichever thread the scheduler wakes first, a failure once the budget is spent is the deadline's.
        if time.monotonic() - started >= deadline_s:
            raise DeadlineExceeded(deadline_s) from exc
        raise


def capped_timeout(timeout_s: float, deadline_s: float) -> float:
    """A per-operation timeout no longer than the whole call's deadline."""
    return min(timeout_s, deadline_s)
