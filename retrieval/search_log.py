"""The tenants' searches, kept for the console's search analytics (``retrieval.search_analytics``).

A search must never wait for its own bookkeeping: :func:`record_search` puts the row's values on a
bounded in-process queue and returns; a writer thread (``core.background``) inserts them in batches
(``SEARCH_LOG_BATCH_SIZE`` rows, at least every ``SEARCH_LOG_FLUSH_S`` seconds) on its own database
connection. A full queue (the database slower than the searches) drops the row and counts it
(``retrieval_search_log_dropped``), as does a batch whose insert fails. A process that exits inserts
the rows still queued first.

What a row keeps: the query text (whitespace collapsed, casefolded), mode, KBs searched, hit count,
best ``relevance`` and whether the BM25 and dense legs agreed; never the API key, client or user.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from core.background import BackgroundWriter
from core.metrics import record_search_log_dropped
from retrieval.models import SearchLog
from retrieval.types import SearchRequest, SearchResponse
from tenants.models import Tenant

logger = logging.getLogger(__name__)

LEGS_COMPARED = ("bm25", "vector")
AGREEMENT_DEPTH = 5  # the legs agree when their first this-many hits share one
FACTS = ("best_relevance", "legs_disagree")  # what a cache entry's summary keeps for the log (answer_facts)


def answer_facts(response: SearchResponse) -> dict[str, Any]:
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


def record_search(tenant: Tenant, request: SearchRequest, hits: int, facts: dict[str, Any]) -> None:
    """Queue one searched query for the analytics (unless the tenant opted out, or the service:
    ``SEARCH_LOG_ENABLED``); never blocks."""
    if not (tenant.record_searches and settings.SEARCH_LOG_ENABLED):
        return
    row = (tenant.pk, normalized_query(request.query), request.mode, sorted(set(request.kb_ids or ())), hits,
           facts.get("best_relevance"), facts.get("legs_disagree"), timezone.now())  # fmt: skip
    writer.put(row)


def flush() -> int:
    """Insert every queued row now, on the calling thread (tests; the writer does it otherwise)."""
    return writer.flush()


def purge_old_search_logs(days: int) -> int:
    """Delete the rows older than ``days`` days (``SEARCH_LOG_RETENTION_DAYS``, the hourly beat task)."""
    deleted, _ = SearchLog.objects.filter(created_at__lt=timezone.now() - timedelta(days=days)).delete()
    return deleted


# --- the writer ------------------------------------------------------------------------------------


def _write(batch: list[tuple[Any, ...]]) -> int:
    fields = ("tenant_id", "query", "mode", "kb_ids", "hits", "best_relevance", "legs_disagree", "created_at")
    try:
        SearchLog.objects.bulk_create([SearchLog(**dict(zip(fields, row))) for row in batch])
    except DatabaseError as exc:  # a tenant deleted meanwhile, the database away: the analytics lose them
        record_search_log_dropped("failed", len(batch))
        logger.warning("search log: %d row(s) not written: %s", len(batch), exc)
        return 0
    return len(batch)


writer: BackgroundWriter[tuple[Any, ...]] = BackgroundWriter(
    "search-log", "SEARCH_LOG", _write, record_search_log_dropped
)
