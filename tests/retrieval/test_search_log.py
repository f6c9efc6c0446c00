"""Recording the tenants' searches for the analytics: what a row keeps (and never), the tenant's
opt-out, the bounded queue that drops instead of waiting, the writer thread, and the purge."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from retrieval import search_log
from retrieval.models import SearchLog
from retrieval.search_log import answer_facts, flush, record_search
from retrieval.tasks import purge_search_logs
from retrieval.types import SearchHit, SearchRequest, SearchResponse
from tenants.services import create_api_key
from tests.concurrency import wait_until
from tests.conftest import client_with_key
from tests.factories import SearchLogFactory, TenantFactory

pytestmark = pytest.mark.django_db


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("retrieval_search_log_dropped_total", {"reason": reason}) or 0.0


def hit(chunk_id: int, relevance: float = 0.5, **ranks: int) -> SearchHit:
    return SearchHit(
        chunk_id=chunk_id, doc_id=chunk_id, kb_id=1, content="", score=0.0, source="", rank=chunk_id, title="",
        source_uri="", doc_type="txt", metadata={}, relevance=relevance,
        retrievers={leg: {"rank": rank, "score": 1.0} for leg, rank in ranks.items()},
    )  # fmt: skip


def response(hits: list[SearchHit], weights=None, degraded=()) -> SearchResponse:
    return SearchResponse(
        results=hits, mode="hybrid", queries=[], weights=weights or {"vector": 1.0, "bm25": 1.0, "graph": 0.0},
        reranked=False, degraded=list(degraded), notes=[], candidates={}, timings_ms={},
    )  # fmt: skip


def test_an_api_search_and_its_cached_repeat_are_each_one_row_without_the_key(sample_kb):
    key = create_api_key(tenant=sample_kb.tenant).raw_key
    client = client_with_key(key)
    body = {"query": "  Firmware   UPDATE ", "mode": "hybrid", "top_k": 3, "kb_ids": [sample_kb.pk]}
    first = client.post("/api/v1/retrieval/search", body, format="json").json()
    second = client.post("/api/v1/retrieval/search", body, format="json").json()
    assert (first["cached"], second["cached"]) == (False, True)

    assert flush() == 2
    rows = list(SearchLog.objects.filter(tenant=sample_kb.tenant).values())
    best = max(result["relevance"] for result in first["results"])
    for row in rows:
        assert row["query"] == "firmware update" and row["mode"] == "hybrid" and row["kb_ids"] == [sample_kb.pk]
        assert row["hits"] == first["total"] and row["best_relevance"] == pytest.approx(best)
        assert row["legs_disagree"] is not None  # both legs answered
        assert not any(key in str(value) or key[:12] in str(value) for value in row.values())
    assert rows[0]["legs_disagree"] == rows[1]["legs_disagree"]  # the cache entry keeps what the log reads


def test_a_tenant_that_opted_out_or_a_service_with_the_log_off_records_nothing(settings, tenant):
    tenant.record_searches = False
    record_search(tenant, SearchRequest(query="firmware"), 3, {"best_relevance": 0.5})
    assert flush() == 0
    tenant.record_searches = True
    settings.SEARCH_LOG_ENABLED = False
    record_search(tenant, SearchRequest(query="firmware"), 3, {"best_relevance": 0.5})
    assert flush() == 0
    settings.SEARCH_LOG_ENABLED = True
    record_search(tenant, SearchRequest(query="firmware"), 3, {"best_relevance": 0.5})
    assert flush() == 1 and SearchLog.objects.get().tenant_id == tenant.pk


def test_the_console_tests_are_not_recorded(admin_client, sample_kb):
    admin_client.post("/admin/retrieval/retrievalrun/", {"tenant": sample_kb.tenant.pk, "query": "firmware update",
                      "mode": "hybrid", "top_k": 5, "max_expansions": 3})  # fmt: skip
    assert flush() == 0


def test_a_full_queue_drops_the_row_and_counts_it_rather_than_wait(settings, tenant):
    settings.SEARCH_LOG_QUEUE_SIZE = 2
    before = dropped("full")
    for query in ("one", "two", "three"):
        record_search(tenant, SearchRequest(query=query), 1, {})
    assert dropped("full") == before + 1
    assert flush() == 2
    assert sorted(SearchLog.objects.values_list("query", flat=True)) == ["one", "two"]


@pytest.mark.django_db(transaction=True)
def test_the_writer_thread_inserts_the_queued_rows_in_batches(settings):
    tenant = TenantFactory()
    settings.SEARCH_LOG_FLUSH_S = 0.05
    settings.SEARCH_LOG_BATCH_SIZE = 2
    for number in range(5):
        record_search(tenant, SearchRequest(query=f"query {number}"), number, {"best_relevance": None})
    wait_until(lambda: SearchLog.objects.count() >= 5, message="the writer to insert the five rows")
    assert sorted(SearchLog.objects.values_list("hits", flat=True)) == [0, 1, 2, 3, 4]
    assert search_log.writer.running and search_log.writer._thread.name == "search-log"


@pytest.mark.django_db(transaction=True)
def test_a_stopping_writer_inserts_what_is_still_queued(settings):
    """What ``atexit`` runs when a process ends: the rows queued meanwhile are inserted, not lost."""
    tenant = TenantFactory()
    settings.SEARCH_LOG_FLUSH_S = 60  # the writer would hold its batch open a minute for more rows
    for number in range(3):
        record_search(tenant, SearchRequest(query=f"query {number}"), number, {})
    assert search_log.writer.running
    search_log.writer.stop()
    assert not search_log.writer.running
    assert sorted(SearchLog.objects.values_list("hits", flat=True)) == [0, 1, 2]


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_cannot_be_written_is_counted_and_raises_nothing():
    tenant = TenantFactory()
    record_search(tenant, SearchRequest(query="gone"), 0, {})
    tenant.delete()  # its rows can no longer be inserted
    before = dropped("failed")
    assert flush() == 0
    assert dropped("failed") == before + 1


def test_rows_older_than_the_retention_are_purged_by_the_beat_task(settings, tenant):
    settings.SEARCH_LOG_RETENTION_DAYS = 30
    old = SearchLogFactory(tenant=tenant, created_at=timezone.now() - timedelta(days=31))
    kept = SearchLogFactory(tenant=tenant, created_at=timezone.now() - timedelta(days=29))
    assert settings.CELERY_BEAT_SCHEDULE["purge-search-logs"]["task"] == purge_search_logs.name
    assert purge_search_logs() == 1
    assert list(SearchLog.objects.values_list("pk", flat=True)) == [kept.pk] and old.pk != kept.pk


def test_the_legs_disagree_when_their_first_five_share_no_hit():
    apart = response([hit(1, bm25=1), hit(2, vector=1), hit(3, bm25=2, vector=6)])
    together = response([hit(1, bm25=1, vector=5), hit(2, vector=1)])
    assert answer_facts(apart) == {"best_relevance": 0.5, "legs_disagree": True}
    assert answer_facts(together)["legs_disagree"] is False


def test_agreement_is_unknown_without_both_legs_or_without_hits():
    hits = [hit(1, 0.2, bm25=1), hit(2, 0.7, bm25=2)]
    assert answer_facts(response(hits, {"vector": 0.0, "bm25": 1.0, "graph": 0.0})) == {
        "best_relevance": 0.7, "legs_disagree": None}  # fmt: skip
    failed = response(hits, degraded=[{"stage": "vector", "cause": "timeout", "message": ""}])
    assert answer_facts(failed)["legs_disagree"] is None
    assert answer_facts(response([])) == {"best_relevance": None, "legs_disagree": None}
