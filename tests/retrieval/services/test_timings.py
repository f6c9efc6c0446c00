"""StageTimings: the one place a search stage starts and ends, on a clock the test moves by hand."""

import threading

import pytest

from retrieval.services import timings as timings_module
from retrieval.services.timings import StageTimings
from tests.concurrency import ManualClock, manual_clock


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    return manual_clock(monkeypatch, timings_module)


def test_a_stage_records_its_milliseconds_and_adds_up_when_entered_again(clock):
    timings = StageTimings()
    with timings.stage("vector"):
        clock.advance(0.010)
    first = timings.milliseconds["vector"]
    with timings.stage("vector"):
        clock.advance(0.004)
    assert first == pytest.approx(10) and timings.milliseconds["vector"] == pytest.approx(14)
    assert list(timings.milliseconds) == ["vector"]


def test_a_failing_stage_is_still_timed_and_its_error_goes_on(clock):
    timings = StageTimings()

    def failing_stage() -> None:
        with timings.stage("bm25"):
            clock.advance(0.003)
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        failing_stage()
    assert timings.milliseconds == {"bm25": pytest.approx(3)}


def test_stages_timed_from_other_threads_all_land():
    timings = StageTimings()
    all_in = threading.Barrier(8)  # every thread is inside its stage at once

    def embed(name: str) -> None:
        with timings.stage(name):
            all_in.wait(10)

    threads = [threading.Thread(target=embed, args=(f"stage-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(timings.milliseconds) == sorted(f"stage-{i}" for i in range(8))


def test_the_critical_path_counts_the_request_threads_stages_and_its_waits_and_adds_up_to_the_total(clock):
    timings = StageTimings()
    started = threading.Event()
    release = threading.Event()

    def embed() -> None:
        with timings.stage("embed"):  # from 0 ms to 5 ms
            started.set()
            release.wait(10)

    with timings.stage("total"):
        worker = threading.Thread(target=embed)
        worker.start()
        started.wait(10)
        with timings.stage("bm25"):  # on the request thread, while "embed" runs elsewhere: 0 to 2 ms
            clock.advance(0.002)
        since = clock.perf_counter()
        clock.advance(0.003)  # the request thread waits for "embed" from 2 ms to 5 ms
        release.set()
        worker.join(10)
        timings.waited("embed", since)

    assert timings.milliseconds == {"embed": pytest.approx(5), "bm25": pytest.approx(2), "total": pytest.approx(5)}
    assert timings.critical_path == {"bm25": pytest.approx(2), "embed": pytest.approx(3), "rest": pytest.approx(0)}


def test_a_stage_of_another_thread_is_not_on_the_critical_path_unless_waited_for(clock):
    timings = StageTimings()

    def embed() -> None:
        with timings.stage("embed"):
            clock.advance(0.004)

    with timings.stage("total"):
        worker = threading.Thread(target=embed)
        worker.start()
        worker.join(10)  # joined without saying it waited for "embed"
        clock.advance(0.001)
    assert timings.milliseconds["embed"] == pytest.approx(4)
    assert timings.critical_path == {"rest": pytest.approx(5)}
