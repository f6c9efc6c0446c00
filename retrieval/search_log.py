"""The tenants' searches, kept for the console's search analytics (``retrieval.search_analytics``).

A search must never wait for its own bookkeeping: :func:`record_search` puts the row's values on a
bounded in-process queue and returns; a writer thread inserts them in batches (``SEARCH_LOG_BATCH_SIZE``
rows, at least every ``SEARCH_LOG_FLUSH_S`` seconds) on its own database connection. A full queue (the
database slower than the searches) drops the row and counts it (``retrieval_search_log_dropped``), as
does a batch whose insert fails. Rows still queued when a process ends are lost: at most a flush's worth.

What a row keeps: the query text (whitespace collapsed, casefolded), mode, KBs searched, hit count,
best ``relevance`` and whether the BM25 and dense legs agreed; never the API key, client or user.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DatabaseError, close_old_connections, connection
from django.dispatch import receiver
from django.utils import timezone

from core.metrics import record_search_log_dropped
from retrieval.models import SearchLog
from retrieval.types import SearchRequest, SearchResponse
from tenants.models import Tenant

logger = logging.getLogger(__name__)

LEGS_COMPARED = ("bm25", "vector")
AGREEMENT_DEPTH = 5  # the legs agree when their first this-many hits share one
FACTS = ("best_relevance", "legs_disagree")  # what a cache entry's summary keeps for the log (answer_facts)
_POLL_S = 0.2  # how often an idle writer looks whether it should stop

_lock = threading.Lock()
_queue: queue.Queue | None = None
_writer: threading.Thread | None = None
_stop = threading.Event()
_owner_pid = 0  # the process the queue and writer belong to (a forked worker starts its own)


def answer_facts(response: SearchResponse) -> dict:
    """What the analytics read of an answer besides its hit count: the best hit's ``relevance``
    (None: no hit) and whether BM25 and dense shared no hit among their first ``AGREEMENT_DEPTH``
    (None: not both legs answered). Judged on the hits returned, each carrying its rank in every
    leg that ranked it."""
    best = max((hit.relevance for hit in response.results), default=None)
    failed = {item["stage"] for item in response.degraded}
    if not response.results or any(response.weights.get(leg, 0) <= 0 or leg in failed for leg in LEGS_COMPARED):
        return {"best_relevance": best, "legs_disagree": None}
    bm25, dense = (
        {hit.chunk_id for hit in response.results if hit.retrievers.get(leg, {}).get("rank", AGREEMENT_DEPTH + 1)
         <= AGREEMENT_DEPTH}
        for leg in LEGS_COMPARED
    )  # fmt: skip
    return {"best_relevance": best, "legs_disagree": not bm25 & dense}


def normalized_query(text: str) -> str:
    """The form a query is counted under: one row per way of asking it, whatever its spacing or case."""
    return " ".join(text.split()).casefold()


def record_search(tenant: Tenant, request: SearchRequest, hits: int, facts: dict) -> None:
    """Queue one searched query for the analytics (unless the tenant opted out, or the service:
    ``SEARCH_LOG_ENABLED``); never blocks."""
    if not (tenant.record_searches and settings.SEARCH_LOG_ENABLED):
        return
    row = (tenant.pk, normalized_query(request.query), request.mode, sorted(set(request.kb_ids or ())), hits,
           facts.get("best_relevance"), facts.get("legs_disagree"), timezone.now())  # fmt: skip
    try:
        _pending().put_nowait(row)
    except queue.Full:
        record_search_log_dropped("full")


def flush() -> int:
    """Insert every queued row now, on the calling thread (tests; the writer does it otherwise)."""
    written = 0
    while batch := _take(settings.SEARCH_LOG_BATCH_SIZE, wait_s=None):
        written += _write(batch)
    return written


def purge_old_search_logs(days: int) -> int:
    """Delete the rows older than ``days`` days (``SEARCH_LOG_RETENTION_DAYS``, the hourly beat task)."""
    deleted, _ = SearchLog.objects.filter(created_at__lt=timezone.now() - timedelta(days=days)).delete()
    return deleted


# --- the queue and its writer -----------------------------------------------------------------------


def _pending() -> queue.Queue:
    """This process's queue, with its writer started (unless ``SEARCH_LOG_FLUSH_S`` is 0)."""
    global _queue, _writer, _owner_pid
    if _owner_pid == os.getpid() and (_writer is not None or settings.SEARCH_LOG_FLUSH_S == 0):
        return _queue
    with _lock:
        if _owner_pid != os.getpid():
            _queue, _writer, _owner_pid = queue.Queue(maxsize=settings.SEARCH_LOG_QUEUE_SIZE), None, os.getpid()
        if _writer is None and settings.SEARCH_LOG_FLUSH_S > 0:
            _stop.clear()
            _writer = threading.Thread(target=_write_until_stopped, name="search-log", daemon=True)
            _writer.start()
    return _queue


def _take(size: int, wait_s: float | None) -> list[tuple]:
    """Up to ``size`` queued rows: those queued now (``wait_s`` None), or, once one comes, those that
    come within ``wait_s`` after it (the writer; none within ``_POLL_S``: an empty batch)."""
    rows: list[tuple] = []
    ends_at = None
    while _queue is not None and len(rows) < size:
        try:
            if wait_s is None:
                rows.append(_queue.get_nowait())
            elif ends_at is None:
                rows.append(_queue.get(timeout=_POLL_S))
                ends_at = time.monotonic() + wait_s
            elif (left_s := ends_at - time.monotonic()) > 0:
                rows.append(_queue.get(timeout=left_s))
            else:
                break
        except queue.Empty:
            break
    return rows


def _write_until_stopped() -> None:
    while not _stop.is_set():
        batch = _take(settings.SEARCH_LOG_BATCH_SIZE, wait_s=settings.SEARCH_LOG_FLUSH_S)
        if batch:
            close_old_connections()
            _write(batch)
    connection.close()  # the thread's own


def _write(batch: list[tuple]) -> int:
    fields = ("tenant_id", "query", "mode", "kb_ids", "hits", "best_relevance", "legs_disagree", "created_at")
    try:
        SearchLog.objects.bulk_create([SearchLog(**dict(zip(fields, row))) for row in batch])
    except DatabaseError as exc:  # a tenant deleted meanwhile, the database away: the analytics lose them
        record_search_log_dropped("failed", len(batch))
        logger.warning("search log: %d row(s) not written: %s", len(batch), exc)
        return 0
    return len(batch)


def _stop_writer() -> None:
    global _writer, _owner_pid
    with _lock:
        writer, _writer = _writer, None
        _stop.set()
    if writer is not None:
        writer.join()
    _owner_pid = 0  # the next row starts a new queue (of the current size) and writer


@receiver(setting_changed)
def _restart_on_new_settings(setting: str, **kwargs) -> None:
    """Tests change the queue's size or the writer's pace: the next row starts them anew (queued rows go)."""
    if setting.startswith("SEARCH_LOG_"):
        _stop_writer()
