"""Waiting and racing without measuring time: a test waits for a condition (with a generous cap, never
asserting how long it took) and races calls on threads released together, each on its own database
connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.01
RACE_TIMEOUT_S = 120


def wait_until(
    condition: Callable[[], T], *, timeout: float = 30, message: str = "the condition", interval: float = POLL_S
) -> T:
    """``condition()``'s first truthy value, polled every ``interval`` seconds; once ``timeout`` seconds
    have passed the test fails with ``message``. The cap only ends a wait that would hang: it is not
    what a test checks, so make it generous."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:g} s: {message}")
        time.sleep(interval)
    return value


def race(*calls: Callable[[], T]) -> list[T | Exception]:
    """Runs each call on its own thread, all released at once by a barrier; returns each call's result
    or the exception it raised, in the order given. Each thread closes its database connection."""
    from django.db import connections

    barrier = threading.Barrier(len(calls))
    outcomes: list[T | Exception] = [AssertionError("never ran")] * len(calls)

    def run(index: int, call: Callable[[], T]) -> None:
        try:
            barrier.wait(timeout=RACE_TIMEOUT_S)
            outcomes[index] = call()
        except Exception as error:
            outcomes[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index, call)) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RACE_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a raced call never ended"
    return outcomes


def meet_before(monkeypatch, owner: object, name: str, parties: int = 2) -> None:
    """Holds each call of ``owner.name`` until ``parties`` threads have made one: every racer has then
    passed whatever check its code made before, which is the race a check-then-insert loses."""
    original = getattr(owner, name)
    barrier = threading.Barrier(parties)

    def met(*args, **kwargs):
        barrier.wait(timeout=RACE_TIMEOUT_S)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, met)


def recorded_sleeps(monkeypatch, module) -> list[tuple[int, float]]:
    """Gives ``module`` a ``time`` whose ``sleep`` records (thread id, seconds), then sleeps as before:
    a product's backoff or poll becomes an event a test can wait for."""
    sleeps: list[tuple[int, float]] = []
    real = module.time

    class RecordingTime:
        def __getattr__(self, name: str):
            return getattr(real, name)

        def sleep(self, seconds: float) -> None:
            sleeps.append((threading.get_ident(), seconds))
            real.sleep(seconds)

    monkeypatch.setattr(module, "time", RecordingTime())
    return sleeps


class ManualClock:
    """A module's ``time`` whose ``monotonic`` and ``perf_counter`` read a time the test moves by hand
    (everything else is the real ``time``'s): durations the code measures are then exact."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


def manual_clock(monkeypatch, module) -> ManualClock:
    """Puts a :class:`ManualClock` in place of ``module.time`` for the test."""
    clock = ManualClock()
    monkeypatch.setattr(module, "time", clock)
    return clock
