"""``engines.deadline.within``: a call's result, its exception, or DeadlineExceeded at the deadline."""
from __future__ import annotations

import threading
import time

import pytest

from engines.deadline import DeadlineExceeded, capped_timeout, within


def test_a_call_within_the_deadline_returns_its_result():
    assert within(1.0, lambda: 6 * 7) == 42


def test_a_call_that_fails_within_the_deadline_raises_its_own_error():
    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        within(1.0, fail)


def test_a_call_past_the_deadline_is_abandoned_at_the_deadline():
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="0.2 s deadline") as info:
        within(0.2, lambda: release.wait(10))
    assert info.value.deadline_s == 0.2
    assert time.monotonic() - started < 3 * 0.2
    release.set()  # let the abandoned call end


def test_per_operation_timeouts_never_exceed_the_deadline():
    assert capped_timeout(5.0, 0.5) == 0.5
    assert capped_timeout(0.3, 2.0) == 0.3
