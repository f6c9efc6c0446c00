"""StageTimings: the one place a search stage starts and ends."""
import threading
import time

import pytest

from retrieval.services.timings import StageTimings


def test_a_stage_records_its_milliseconds_and_adds_up_when_entered_again():
    timings = StageTimings()
    with timings.stage("vector"):
        time.sleep(0.01)
    first = timings.milliseconds["vector"]
    with timings.stage("vector"):
        time.sleep(0.01)
    assert first >= 10 and timings.milliseconds["vector"] >= first + 10
    assert list(timings.milliseconds) == ["vector"]


def test_a_failing_stage_is_still_timed_and_its_error_goes_on():
    timings = StageTimings()
    with pytest.raises(ZeroDivisionError), timings.stage("bm25"):
        1 / 0
    assert list(timings.milliseconds) == ["bm25"]


def test_stages_timed_from_other_threads_all_land():
    timings = StageTimings()

    def embed(name: str) -> None:
        with timings.stage(name):
            time.sleep(0.005)

    threads = [threading.Thread(target=embed, args=(f"stage-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(timings.milliseconds) == sorted(f"stage-{i}" for i in range(8))


def test_the_critical_path_counts_the_request_threads_stages_and_its_waits_and_adds_up_to_the_total():
    timings = StageTimings()
    started = threading.Event()
    release = threading.Event()

    def embed() -> None:
        with timings.stage("embed"):
            started.set()
            release.wait(10)

    with timings.stage("total"):
        worker = threading.Thread(target=embed)
        worker.start()
        started.wait(10)
        with timings.stage("bm25"):  # on the request thread, while "embed" runs elsewhere
            time.sleep(0.002)
        since = time.perf_counter()
        release.set()
        worker.join(10)
        timings.waited("embed", since)

    path = timings.critical_path
    assert set(path) == {"bm25", "embed", "rest"}
    assert path["bm25"] == pytest.approx(timings.milliseconds["bm25"], abs=0.002)
    assert path["embed"] < timings.milliseconds["embed"]  # only the wait for it is on the path
    assert sum(path.values()) == pytest.approx(timings.milliseconds["total"], abs=0.01)


def test_a_stage_of_another_thread_is_not_on_the_critical_path_unless_waited_for():
    timings = StageTimings()

    def embed() -> None:
        with timings.stage("embed"):
            pass

    with timings.stage("total"):
        worker = threading.Thread(target=embed)
        worker.start()
        worker.join(10)  # joined without saying it waited for "embed"
    assert "embed" in timings.milliseconds
    assert set(timings.critical_path) == {"rest"}
    assert timings.critical_path["rest"] == pytest.approx(timings.milliseconds["total"], abs=0.002)
