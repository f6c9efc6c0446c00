"""``engines.deadline.within``: a call's result, its exception, or DeadlineExceeded at the deadline."""

from __future__ import annotations

import socket
import threading

import pytest

from engines.deadline import DeadlineExceeded, capped_timeout, within
from tests.concurrency import wait_until


def test_a_call_within_the_deadline_returns_its_result():
    assert within(1.0, lambda: 6 * 7) == 42


def test_a_call_that_fails_within_the_deadline_raises_its_own_error():
    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        within(1.0, fail)


def test_a_call_past_the_deadline_is_abandoned_at_the_deadline():
    """The caller gets the deadline while the call still runs: it waits for the release only this test gives."""
    release, ended = threading.Event(), threading.Event()
    with pytest.raises(DeadlineExceeded, match="0.2 s deadline") as info:
        within(0.2, lambda: (release.wait(60), ended.set()))
    assert info.value.deadline_s == 0.2
    assert not ended.is_set()
    release.set()  # let the abandoned call end
    wait_until(ended.is_set, message="the abandoned call to end once released")


def test_per_operation_timeouts_never_exceed_the_deadline():
    assert capped_timeout(5.0, 0.5) == 0.5
    assert capped_timeout(0.3, 2.0) == 0.3


def test_a_socket_timeout_capped_at_the_deadline_is_reported_as_the_deadline():
    """The socket's timeout and the wait end at the same instant: the cause must not depend on which wins."""
    with socket.create_server(("127.0.0.1", 0)) as silent_peer:  # accepts (backlog) and never answers
        for _ in range(20):
            with socket.create_connection(silent_peer.getsockname()) as connection:
                connection.settimeout(capped_timeout(5.0, 0.05))
                with pytest.raises(DeadlineExceeded):
                    within(0.05, lambda: connection.recv(1))
