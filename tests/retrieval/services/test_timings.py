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
