"""The result cache's writer thread (``retrieval.cache.writer``, a ``core.background`` writer): a
computed answer is stored after the search returned, a full queue drops and counts, a stopping
process stores what is queued, and Redis going away between the answer and its write costs the
answer nothing; the semantic cache's row of an answer is saved by the same writer, after the answer.
The other cache tests store on the request thread (``tests/conftest.py``)."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import REGISTRY

from knowledge.knowledge_bases import update_search_settings
from knowledge.models import KnowledgeBase
from knowledge.selectors.search import searched_knowledge
from retrieval import cache
from retrieval.cache import cached_search, search_cache_key
from retrieval.models import SemanticCacheEntry
from retrieval.types import SearchRequest
from tenants.models import Tenant
from tests.concurrency import RACE_TIMEOUT_S, race, wait_until
from tests.retrieval.test_cache import GARDEN, KETTLE, ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("retrieval_search_cache_writes_dropped_total", {"reason": reason}) or 0.0


@pytest.fixture
def kettles(tmp_path, tenant, embedder, settings):
    """A tenant with the cache's two passages, and the writer thread on."""
    ingest(tmp_path / "manuals", tenant, {"kettle.txt": KETTLE, "garden.txt": GARDEN})
    settings.SEARCH_CACHE_WRITE_QUEUE_SIZE = 100
    return tenant


class HeldWriter:
    """The writer's batches wait for ``release()``; ``taken`` is set once it holds one, ``written`` once
    one is written."""

    def __init__(self, monkeypatch):
        self.taken, self._released, self.written = threading.Event(), threading.Event(), threading.Event()
        self.batches: list[int] = []
        original = cache.writer.write

        def held(batch):
            self.batches.append(len(batch))
            self.taken.set()
            assert self._released.wait(RACE_TIMEOUT_S), "the test never released the writer"
            try:
                return original(batch)
            finally:
                self.written.set()

        monkeypatch.setattr(cache.writer, "write", held)

    def release(self) -> None:
        self._released.set()


def stored(tenant, request: SearchRequest) -> bool:
    return cache.cache.get(search_cache_key(tenant, request, searched_knowledge(tenant))) is not None


def bm25(query: str) -> SearchRequest:
    return SearchRequest(query=query, mode="bm25", top_k=5)


def test_a_search_returns_before_its_answer_is_stored_and_the_next_is_an_exact_hit_once_it_is(kettles, monkeypatch):
    writer = HeldWriter(monkeypatch)
    request = bm25("electric kettle water")
    first = cached_search(kettles, request)
    assert first.cached is False and first.response.results and first.response.degraded == []
    wait_until(writer.taken.is_set, message="the writer to take the answer")
    assert not stored(kettles, request)  # returned while its write waits on the writer thread
    writer.release()
    wait_until(lambda: stored(kettles, request), message="the writer to store the answer")
    second = cached_search(kettles, request)
    assert second.cached is True and second.stored[1] == first.stored[1]  # the same bytes
    assert writer.batches == [1] and cache.writer._thread.name == "search-cache"


@pytest.mark.django_db(transaction=True)
def test_answers_of_several_request_threads_are_stored_in_one_round_trip(
    kettles, monkeypatch, settings, redis_round_trips
):
    settings.SEARCH_CACHE_WRITE_BATCH_SIZE, settings.SEARCH_CACHE_WRITE_FLUSH_S = 3, 60  # one batch of three
    writer = HeldWriter(monkeypatch)
    requests = [bm25("kettle"), bm25("tomato"), bm25("sunlight")]
    answers = race(*[lambda request=request: cached_search(kettles, request) for request in requests])
    assert all(answer.cached is False for answer in answers), answers
    wait_until(writer.taken.is_set, message="the writer to take the three answers")
    before = redis_round_trips[0]
    writer.release()
    wait_until(writer.written.is_set, message="the writer to store them")
    assert redis_round_trips[0] - before == 1 and writer.batches == [3]
    assert all(stored(kettles, request) for request in requests)


def test_a_full_queue_drops_the_answer_counts_it_and_releases_its_lock(kettles, monkeypatch, settings):
    settings.SEARCH_CACHE_WRITE_QUEUE_SIZE = 1
    writer = HeldWriter(monkeypatch)
    before = dropped("full")
    held, queued, lost = bm25("kettle"), bm25("tomato"), bm25("sunlight")
    cached_search(kettles, held)
    wait_until(writer.taken.is_set, message="the writer to take the first answer")
    cached_search(kettles, queued)  # fills the queue of one
    assert cached_search(kettles, lost).cached is False  # answered all the same
    assert dropped("full") == before + 1
    lost_key = search_cache_key(kettles, lost, searched_knowledge(kettles))
    assert cache.cache.get(f"{lost_key}:lock") is None  # identical searches compute instead of waiting for it
    writer.release()
    wait_until(lambda: stored(kettles, held) and stored(kettles, queued), message="the queued answers stored")
    assert not stored(kettles, lost)
    assert cached_search(kettles, queued).cached is True


def test_a_stopping_writer_stores_what_is_queued(kettles, settings):
    """What ``atexit`` runs as a process ends: the writer, holding a batch open for a minute, stores it."""
    settings.SEARCH_CACHE_WRITE_FLUSH_S = 60
    request = bm25("electric kettle")
    cached_search(kettles, request)
    assert cache.writer.running
    cache.writer.stop()
    assert not cache.writer.running and stored(kettles, request)


def test_redis_gone_before_the_write_costs_the_answer_nothing(private_redis, kettles, monkeypatch):
    writer = HeldWriter(monkeypatch)
    before = dropped("failed")
    request = bm25("electric kettle water")
    answer = cached_search(kettles, request)
    wait_until(writer.taken.is_set, message="the writer to take the answer")
    private_redis()  # Redis stops between the answer and its write
    writer.release()
    wait_until(lambda: dropped("failed") == before + 1, message="the failed write to be counted")
    assert answer.response.degraded == [] and answer.response.results
    again = cached_search(kettles, request)  # Redis still down: computed, not degraded
    assert again.cached is False and again.response.degraded == []
    assert [hit.chunk_id for hit in again.response.results] == [hit.chunk_id for hit in answer.response.results]


def semantic_rows(tenant) -> int:
    return SemanticCacheEntry.objects.filter(tenant=tenant).count()


def hybrid(query: str) -> SearchRequest:
    return SearchRequest(query=query, mode="hybrid", top_k=5)


@pytest.fixture
def semantic_kettles(kettles):
    """The kettles' KB with its semantic cache on (the writer thread reads the tenant's rows: committed)."""
    update_search_settings(KnowledgeBase.objects.get(tenant=kettles, name="manuals"), {"semantic_cache": True})
    return kettles


@pytest.mark.django_db(transaction=True)
def test_the_semantic_cache_row_is_saved_by_the_writer_after_its_answer(semantic_kettles, monkeypatch):
    writer = HeldWriter(monkeypatch)
    asked = hybrid("How long does the electric kettle take to boil water?")
    assert cached_search(semantic_kettles, asked).cached is False
    wait_until(writer.taken.is_set, message="the writer to take the answer")
    assert semantic_rows(semantic_kettles) == 0  # the request returned without writing its row
    writer.release()
    wait_until(lambda: semantic_rows(semantic_kettles) == 1, message="the writer to save the row")
    assert stored(semantic_kettles, asked)
    paraphrase = cached_search(semantic_kettles, hybrid("How long does the electric kettle need to boil water?"))
    assert paraphrase.cached == "semantic" and paraphrase.semantic.query == asked.query


@pytest.mark.django_db(transaction=True)
def test_rows_the_database_refuses_are_counted_and_the_answer_stays_stored(semantic_kettles, monkeypatch):
    writer = HeldWriter(monkeypatch)
    before = dropped("semantic_failed")
    asked = hybrid("How long does the electric kettle take to boil water?")
    answer = cached_search(semantic_kettles, asked)
    wait_until(writer.taken.is_set, message="the writer to take the answer")
    tenant_id, key = (
        semantic_kettles.pk,
        search_cache_key(semantic_kettles, asked, searched_knowledge(semantic_kettles)),
    )
    Tenant.objects.filter(pk=tenant_id).delete()  # its row's tenant is gone when the writer saves it
    writer.release()
    wait_until(lambda: dropped("semantic_failed") == before + 1, message="the refused row to be counted")
    assert answer.response.results and not SemanticCacheEntry.objects.filter(tenant_id=tenant_id).exists()
    assert cache.cache.get(key) is not None  # Redis kept the answer: only its semantic row was lost
