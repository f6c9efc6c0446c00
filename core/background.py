"""Writes a request must not wait for: a bounded in-process queue and one writer thread per process
that writes it in batches (the search analytics' rows, the result cache's entries).

``put`` never blocks: a full queue (the store slower than the requests) drops the item and counts it
(``on_drop("full", 1)``); the write function counts its own failures. The writer takes up to
``<PREFIX>_BATCH_SIZE`` items, those that come within ``<PREFIX>_FLUSH_S`` seconds of the first, and
writes them in one call. ``<PREFIX>_FLUSH_S`` 0: no writer thread, items wait for :meth:`flush` (tests
whose rows the writer's own database connection could not see); ``<PREFIX>_QUEUE_SIZE`` 0: no queue,
``put`` writes on the calling thread. A process that exits writes what is still queued first
(``atexit``); a forked child starts its own queue and writer.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.core.signals import setting_changed
from django.db import close_old_connections, connections

T = TypeVar("T")

logger = logging.getLogger(__name__)

POLL_S = 0.2  # how often an idle writer looks whether it should stop
STOP_TIMEOUT_S = 10.0  # how long an exiting process waits for the writer to write what is queued


class BackgroundWriter(Generic[T]):
    """One kind of deferred write; its settings are ``<prefix>_QUEUE_SIZE``, ``_BATCH_SIZE`` and ``_FLUSH_S``,
    read when the queue starts (a change of any of them, in tests, starts it anew; queued items go)."""

    def __init__(self, name: str, prefix: str, write: Callable[[list[T]], int], on_drop: Callable[[str, int], None]):
        self.name = name  # the writer thread's name
        self.prefix = prefix
        self.write = write  # writes a batch, returns how many it wrote; counts (on_drop) and logs its failures
        self.on_drop = on_drop
        self._lock = threading.Lock()
        self._queue: queue.Queue[T] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._owner_pid = 0  # the process the queue and thread belong to
        atexit.register(self.stop)
        setting_changed.connect(self._restart_on_new_settings, weak=False)

    def _setting(self, name: str) -> Any:
        return getattr(settings, f"{self.prefix}_{name}")

    def put(self, item: T) -> bool:
        """Queue ``item`` for the writer (or write it now: no queue); never blocks. False: dropped, the
        queue was full."""
        if self._setting("QUEUE_SIZE") == 0:
            self.write([item])
            return True
        try:
            self._pending().put_nowait(item)
        except queue.Full:
            self.on_drop("full", 1)
            return False
        return True

    def flush(self) -> int:
        """Write every queued item now, on the calling thread; how many were written."""
        written = 0
        while batch := self._take(self._setting("BATCH_SIZE"), wait_s=None):
            written += self.write(batch)
        return written

    def stop(self) -> None:
        """Stop the writer once it has written what is queued (process exit; new settings). The next
        item starts a new queue and writer."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_TIMEOUT_S)
            if thread.is_alive():
                logger.warning(
                    "%s: the writer did not finish within %g s; its items are lost", self.name, STOP_TIMEOUT_S
                )
        self._owner_pid = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _pending(self) -> queue.Queue[T]:
        """This process's queue, with its writer started (unless ``<prefix>_FLUSH_S`` is 0)."""
        pid, flush_s, pending = os.getpid(), self._setting("FLUSH_S"), self._queue
        if pending is not None and self._owner_pid == pid and (self._thread is not None or flush_s == 0):
            return pending
        with self._lock:
            if self._queue is None or self._owner_pid != pid:
                self._queue = queue.Queue(maxsize=self._setting("QUEUE_SIZE"))
                self._thread, self._owner_pid = None, pid
            if self._thread is None and flush_s > 0:
                self._stop.clear()
                self._thread = threading.Thread(target=self._write_until_stopped, name=self.name, daemon=True)
                self._thread.start()
            return self._queue

    def _take(self, size: int, wait_s: float | None) -> list[T]:
        """Up to ``size`` queued items: those queued now (``wait_s`` None), or, once one comes, those that
        come within ``wait_s`` after it (the writer; none within ``POLL_S``, or a stop: an empty batch)."""
        items: list[T] = []
        ends_at = None
        pending = self._queue
        while pending is not None and len(items) < size:
            try:
                if wait_s is None:
                    items.append(pending.get_nowait())
                elif ends_at is None:
                    items.append(pending.get(timeout=POLL_S))
                    ends_at = time.monotonic() + wait_s
                elif (left_s := ends_at - time.monotonic()) > 0 and not self._stop.is_set():
                    items.append(pending.get(timeout=min(left_s, POLL_S)))
                else:
                    break
            except queue.Empty:
                if ends_at is None or self._stop.is_set():
                    break
        return items

    def _write_until_stopped(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self._take(self._setting("BATCH_SIZE"), wait_s=self._setting("FLUSH_S"))
                if batch:
                    close_old_connections()  # the thread's own database connection, as a request's would be
                    self.write(batch)
            close_old_connections()
            self.flush()  # what came before the stop
        finally:
            connections.close_all()  # the thread's own, if its writes used the database

    def _restart_on_new_settings(self, setting: str, **kwargs: Any) -> None:
        if setting.startswith(f"{self.prefix}_"):
            self.stop()
