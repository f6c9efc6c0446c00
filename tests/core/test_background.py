"""core.background.BackgroundWriter by itself: batches, the unbuffered mode, a full queue. Its users'
own tests: tests/retrieval/test_search_log.py, tests/retrieval/test_cache_writer.py."""

from __future__ import annotations

import threading

import pytest

from core.background import BackgroundWriter
from tests.concurrency import wait_until

written: list[tuple[str, list[int]]] = []  # (the writing thread's name, its batch)
dropped: list[tuple[str, int]] = []


def write(batch: list[int]) -> int:
    written.append((threading.current_thread().name, batch))
    return len(batch)


writer: BackgroundWriter[int] = BackgroundWriter(
    "test-writer", "BACKGROUND_TEST", write, lambda reason, count: dropped.append((reason, count))
)


@pytest.fixture(autouse=True)
def fresh(settings):
    settings.BACKGROUND_TEST_QUEUE_SIZE, settings.BACKGROUND_TEST_BATCH_SIZE = 10, 3
    settings.BACKGROUND_TEST_FLUSH_S = 0.05
    written.clear()
    dropped.clear()
    yield
    writer.stop()


def test_the_writer_thread_writes_batches_of_at_most_the_batch_size(settings):
    settings.BACKGROUND_TEST_FLUSH_S = 60  # a batch closes when full, not by time
    for item in range(6):
        assert writer.put(item)
    wait_until(lambda: len(written) == 2, message="two full batches")
    assert written == [("test-writer", [0, 1, 2]), ("test-writer", [3, 4, 5])]


def test_without_a_queue_the_calling_thread_writes_at_once(settings):
    settings.BACKGROUND_TEST_QUEUE_SIZE = 0
    assert writer.put(7) and written == [(threading.current_thread().name, [7])]
    assert not writer.running


def test_a_full_queue_drops_and_counts_rather_than_wait(settings):
    settings.BACKGROUND_TEST_QUEUE_SIZE, settings.BACKGROUND_TEST_FLUSH_S = 2, 0  # no writer: nothing drains
    assert [writer.put(item) for item in range(3)] == [True, True, False]
    assert dropped == [("full", 1)]
    assert writer.flush() == 2 and written == [(threading.current_thread().name, [0, 1])]


def test_stopping_writes_what_is_queued_and_the_next_item_starts_anew(settings):
    settings.BACKGROUND_TEST_FLUSH_S = 60  # the writer holds its last batch open for more
    for item in range(4):
        writer.put(item)
    writer.stop()
    assert [item for _, batch in written for item in batch] == [0, 1, 2, 3] and not writer.running
    settings.BACKGROUND_TEST_FLUSH_S = 0.05
    assert writer.put(9)
    wait_until(lambda: [9] in [batch for _, batch in written], message="a new writer for the next item")
