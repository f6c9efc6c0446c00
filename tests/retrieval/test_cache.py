"""The search result cache over the real embedded Redis: hits, keys, invalidation, stampedes, outages.

The corpus is ingested with the real ``ingest`` command and model; most searches are BM25, so only
the ingest embeds.
"""

from __future__ import annotations

import io
import json
import re
import threading
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from knowledge.knowledge_bases import update_search_settings
from knowledge.models import DictionaryTerm, KnowledgeBase, KnowledgeBaseVersion, Synonym
from knowledge.selectors.search import searched_knowledge
from retrieval import cache
from retrieval.cache import cached_search, search_cache_key
from retrieval.services.search import search
from retrieval.types import SearchRequest
from tests.concurrency import race, recorded_sleeps, wait_until
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory

KETTLE = "The stainless steel electric kettle boils 1.7 litres of water in under four minutes."
GARDEN = "Tomato seedlings need at least six hours of direct sunlight every day."
QUERY = {"query": "electric kettle water", "top_k": 5}


def post(client, body: dict = QUERY, path: str = "bm25"):
    response = client.post(f"/api/v1/retrieval/{path}", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def ingest(folder: Path, tenant, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    call_command("ingest", str(folder), tenant=tenant.name, kb="manuals", no_progress=True, stdout=io.StringIO())


@pytest.fixture
def client(tmp_path, tenant, embedder):
    """A client of a tenant whose KB "manuals" holds the two passages above."""
    ingest(tmp_path / "manuals", tenant, {"kettle.txt": KETTLE, "garden.txt": GARDEN})
    return client_for(tenant)


# --- hits and keys ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize("path", ["bm25", "hybrid"])
def test_a_repeated_search_is_answered_from_the_cache(client, pipeline_runs, path):
    first = post(client, path=path)
    assert first["cached"] is False and first["results"]
    second = post(client, path=path)
    assert second["cached"] is True
    assert second["results"] == first["results"]
    assert {k: second[k] for k in ("mode", "queries", "weights", "candidates", "degraded", "notes")} == {
        k: first[k] for k in ("mode", "queries", "weights", "candidates", "degraded", "notes")
    }
    assert set(second["timings_ms"]) == {"cache", "total"}  # not the first request's stage timings
    assert second["request_id"] != first["request_id"]
    assert len(pipeline_runs) == 1


@pytest.mark.slow
@pytest.mark.django_db
def test_a_hit_sends_the_stored_rendering_and_decodes_it_only_for_readers(client, tenant, pipeline_runs):
    answers = [client.post("/api/v1/retrieval/hybrid", data=json.dumps(QUERY), content_type="application/json")
               for _ in range(2)]  # fmt: skip
    for answer in answers:  # what DRF's renderer makes of the body: the same order, separators and escapes
        assert answer["Content-Type"] == "application/json"
        assert answer.content == JSONRenderer().render(answer.json())
    first, second = (answer.json() for answer in answers)
    assert second["cached"] is True and list(second) == list(first) and len(pipeline_runs) == 1
    request = SearchRequest(query=QUERY["query"], top_k=5, mode="bm25")
    computed, stored = cached_search(tenant, request), cached_search(tenant, request)  # the console's way in
    assert stored.cached is True and stored.total == computed.total == len(computed.response.results)
    assert stored.response.results == computed.response.results and stored.query == computed.query
    assert set(stored.response.timings_ms) == {"cache", "total"}


@pytest.mark.slow
@pytest.mark.django_db
def test_equivalent_requests_share_an_entry(client, pipeline_runs):
    kb_id = post(client)["results"][0]["kb_id"]
    assert post(client, {"query": "  electric   kettle\twater ", "top_k": 5})["cached"] is True
    filtered = {**QUERY, "filters": {"doc_type": "txt", "tags": {"any": ["a", "b"]}}, "kb_ids": [kb_id, kb_id]}
    assert post(client, filtered)["cached"] is False
    reordered = {"kb_ids": [kb_id], "filters": {"tags": {"any": ["a", "b"]}, "doc_type": "txt"}, **QUERY}
    assert post(client, reordered)["cached"] is True
    assert len(pipeline_runs) == 2


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        {"top_k": 4},
        {"query": "Electric kettle water"},
        {"filters": {"doc_type": "md"}},
        {"weights": {"bm25": 0.5}},
        {"candidates": 20},
        {"rrf_k": 10},
        {"expand": {"synonyms": False}},
        {"expand": {"max_expansions": 1}},
    ],
)
def test_every_option_is_part_of_the_key(client, change):
    assert post(client)["cached"] is False
    assert post(client, {**QUERY, **change})["cached"] is False
    assert post(client, {**QUERY, **change})["cached"] is True


@pytest.mark.slow
@pytest.mark.django_db
def test_the_mode_and_the_tenants_expansion_defaults_are_part_of_the_key(client, tenant):
    post(client)
    assert post(client, {**QUERY, "mode": "bm25"}, path="search")["cached"] is True  # same mode, other endpoint
    assert post(client, path="vector")["cached"] is False
    tenant.expand_spelling = True
    tenant.save(update_fields=["expand_spelling"])
    assert post(client)["cached"] is False


def another_value(value):
    """A different value of the same type."""
    if value is None:  # an optional number left unset (HNSW_EF_SEARCH: chosen per search)
        return 1
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return f"{value}-changed"
    if isinstance(value, list):
        return [*value, "changed"]
    if isinstance(value, dict):
        return {key: another_value(item) for key, item in value.items()}
    raise TypeError(f"no other value for {value!r}")


@pytest.mark.django_db
@pytest.mark.parametrize("name", django_settings.RANKING_SETTINGS)
def test_every_ranking_setting_is_part_of_the_key(tenant, settings, name):
    request = SearchRequest(query="electric kettle water")
    before = search_cache_key(tenant, request, searched_knowledge(tenant))
    setattr(settings, name, another_value(getattr(settings, name)))
    assert search_cache_key(tenant, request, searched_knowledge(tenant)) != before


# Settings the search and engine code reads that never change which passages rank where, and why.
# A setting read there that is neither here nor marked Ranks in retrieval_site/settings/ fails below.
NOT_RANKING = {
    "BASE_DIR": "a path",
    "VAR_DIR": "a path",
    "LEXICAL_INDEX_DIR": "where tantivy keeps indexes",
    "ELASTICSEARCH_INDEX_PREFIX": "index names",
    "NEO4J_URL": "which engine keeps the graph; both walk it alike (tests/production/test_graph_parity.py)",
    "NEO4J_TIMEOUT_S": "a timeout degrades the answer, and degraded answers are not cached",
    "MILVUS_URI": "which Milvus server keeps the vectors (VECTOR_BACKEND, which ranks, picks Milvus at all)",
    "MILVUS_TIMEOUT_S": "a timeout degrades the answer, and degraded answers are not cached",
    "EMBEDDING_MODEL": "the model of new KBs; a KB searches with the model it records",
    "EMBEDDING_API_KEY": "credentials",
    "EMBEDDING_BATCH_SIZE": "batching of the same computation",
    "EMBEDDING_TIMEOUT_S": "a timeout degrades the answer, and degraded answers are not cached",
    "TORCH_THREADS": "threads of the same computation",
    "SEARCH_VARIANT_THREADS": "threads of the same computation",
    "ONNX_THREADS": "threads of the same computation",
    "ONNX_BATCH_SIZE": "batching of the same computation",
    "ONNX_CACHE_DIR": "where exported graphs are kept",
    "SEARCH_CACHE_TTL_S": "the cache itself",
    "SEARCH_CACHE_WAIT_S": "the cache itself",
    "SEMANTIC_CACHE_MIN_COSINE": "which cached answer is reused, not how one ranks",
    "HNSW_M": "the shape of an HNSW index when one is built, not read by a search",
    "HNSW_EF_CONSTRUCTION": "the shape of an HNSW index when one is built, not read by a search",
    "LEXICAL_FILTER_IN_INDEX": "where BM25's filter is applied (in the index or by chunk ids), same hits and scores",
    "LLM_API_KEY": "credentials",
    "LLM_TIMEOUT_S": "a timeout degrades the answer, and degraded answers are not cached",
    "RERANKER_API_KEY": "credentials",
    "RERANKER_TIMEOUT_S": "a timeout degrades the answer, and degraded answers are not cached",
    "RERANKER_RETRIES": "retries of the same request",
    "RERANK_ON_FAILURE": "a failed rerank is degraded, and degraded answers are not cached, or an error",
    "SEARCH_DEADLINE_MS": "a missed deadline degrades the answer, and degraded answers are not cached",
    "RANKING_SETTINGS": "the group itself",
    "AUTH_USER_MODEL": "whose console history a run is (retrieval.models.RetrievalRun)",
    "KB_VERSION_GATE_NDCG": "whether a gated version switches (retrieval.evaluation.gate), not how one ranks",
    "RATE_LIMIT_WINDOW_S": "how MCP tool calls are counted against the key's tier (retrieval.mcp_tools)",
    **dict.fromkeys(
        (
            "SEARCH_LOG_ENABLED",
            "SEARCH_LOG_RETENTION_DAYS",
            "SEARCH_LOG_QUEUE_SIZE",
            "SEARCH_LOG_BATCH_SIZE",
            "SEARCH_LOG_FLUSH_S",
        ),
        "what the search analytics keep of answers (retrieval.search_log), not the answers",
    ),  # fmt: skip
}


def test_every_setting_the_search_code_reads_is_ranking_or_known_not_to_be():
    root = Path(__file__).resolve().parents[2]
    read = {
        name
        for package in ("retrieval", "engines")
        for path in (root / package).rglob("*.py")
        for name in re.findall(r"\bsettings\.([A-Z][A-Z0-9_]*)", path.read_text(encoding="utf-8"))
    }
    assert read - set(django_settings.RANKING_SETTINGS) - NOT_RANKING.keys() == set()
    assert set(django_settings.RANKING_SETTINGS) & NOT_RANKING.keys() == set()


@pytest.mark.slow
@pytest.mark.django_db
def test_a_change_of_the_kbs_search_settings_makes_old_entries_unreachable(client, tenant, pipeline_runs):
    body = {**QUERY, "weights": {"bm25": 1.0}}
    post(client, body, path="hybrid")
    assert post(client, body, path="hybrid")["cached"] is True
    kb = KnowledgeBase.objects.get(tenant=tenant, name="manuals")
    update_search_settings(kb, {"weights": {"vector": 0.0}})
    changed = post(client, body, path="hybrid")
    assert changed["cached"] is False and changed["weights"]["vector"] == 0.0
    update_search_settings(kb, {"weights": {"vector": 0.0}}, version=kb.active_version)  # same effective settings
    assert post(client, body, path="hybrid")["cached"] is True
    assert len(pipeline_runs) == 2


@pytest.mark.slow
@pytest.mark.django_db
def test_a_reingest_makes_old_entries_unreachable(client, tenant, tmp_path):
    before = post(client)
    assert post(client)["cached"] is True
    version = KnowledgeBaseVersion.objects.get(knowledge_base__tenant=tenant)
    revision = version.revision

    ingest(tmp_path / "manuals", tenant, {"kettle.txt": KETTLE.replace("1.7 litres", "2.5 litres")})
    version.refresh_from_db()
    assert version.revision > revision
    after = post(client)
    assert after["cached"] is False
    assert "2.5 litres" in after["results"][0]["content"]
    assert "2.5 litres" not in before["results"][0]["content"]
    assert post(client)["cached"] is True


@pytest.mark.slow
@pytest.mark.django_db
def test_a_synonym_or_protected_term_edit_makes_old_entries_unreachable(client, tenant):
    assert post(client, {"query": "boiler", "top_k": 5})["results"] == []
    assert post(client, {"query": "boiler", "top_k": 5})["cached"] is True
    synonym = Synonym.objects.create(tenant=tenant, terms=["boiler", "kettle"])
    expanded = post(client, {"query": "boiler", "top_k": 5})
    assert expanded["cached"] is False
    assert "kettle" in expanded["results"][0]["content"]
    assert post(client, {"query": "boiler", "top_k": 5})["cached"] is True

    synonym.delete()
    unexpanded = post(client, {"query": "boiler", "top_k": 5})
    assert unexpanded["cached"] is False and unexpanded["results"] == []

    post(client)
    assert post(client)["cached"] is True
    DictionaryTerm.objects.create(tenant=tenant, kind=DictionaryTerm.Kind.TERM, value="PPR-9087")
    assert post(client)["cached"] is False


@pytest.mark.slow
@pytest.mark.django_db
def test_degraded_answers_are_not_cached(client, pipeline_runs):
    body = {**QUERY, "rerank": True}  # no reranker configured: degraded, fused order kept
    first = post(client, body)
    assert first["degraded"][0]["cause"] == "not_configured"
    assert post(client, body)["cached"] is False
    assert len(pipeline_runs) == 2


@pytest.mark.slow
@pytest.mark.django_db
def test_reranked_answers_are_cached(client, rerank_server, pipeline_runs):
    body = {**QUERY, "rerank": True}
    first = post(client, body)
    assert first["reranked"] is True and not first["degraded"]
    second = post(client, body)
    assert second["cached"] is True and second["results"] == first["results"]
    assert len(pipeline_runs) == 1


@pytest.mark.django_db
def test_unknown_kb_ids_are_still_404(api_client):
    response = api_client.post(
        "/api/v1/retrieval/bm25", data=json.dumps({**QUERY, "kb_ids": [987654321]}), content_type="application/json"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "knowledge_base_not_found"


@pytest.mark.django_db
def test_a_ttl_of_zero_disables_the_cache(api_client, settings, pipeline_runs):
    settings.SEARCH_CACHE_TTL_S = 0
    assert [post(api_client)["cached"] for _ in range(2)] == [False, False]
    assert len(pipeline_runs) == 2


@pytest.mark.django_db
def test_entries_expire(api_client, settings):
    settings.SEARCH_CACHE_TTL_S = 1
    assert [post(api_client)["cached"] for _ in range(2)] == [False, True]
    wait_until(lambda: post(api_client)["cached"] is False, interval=0.1, message="the entry to expire (hits keep it)")


@pytest.mark.django_db
def test_a_miss_takes_two_round_trips_and_a_hit_one(tenant, redis_round_trips, pipeline_runs):
    """A miss: the lookup taking the lock, then the answer stored with the lock released; a hit: the lookup."""
    cached_search(tenant, SearchRequest(query="warm up", mode="bm25"))  # connects (handshake, PING)
    request = SearchRequest(query="kettle", mode="bm25")
    before = redis_round_trips[0]
    assert cached_search(tenant, request).cached is False
    after_miss = redis_round_trips[0]
    assert cached_search(tenant, request).cached is True
    assert (after_miss - before, redis_round_trips[0] - after_miss) == (2, 1)
    assert len(pipeline_runs) == 2
    assert cache.cache.get(search_cache_key(tenant, request, searched_knowledge(tenant)) + ":lock") is None  # released


@pytest.mark.django_db
def test_a_failed_search_releases_the_lock(tenant, monkeypatch):
    def failing(tenant, request, knowledge=None, **options):
        raise RuntimeError("pipeline crashed")

    monkeypatch.setattr(cache, "search", failing)
    request = SearchRequest(query="kettle", mode="bm25")
    with pytest.raises(RuntimeError):
        cached_search(tenant, request)
    assert cache.cache.get(search_cache_key(tenant, request, searched_knowledge(tenant)) + ":lock") is None


# --- concurrent misses -----------------------------------------------------------------------------


def concurrent_searches(tenant, count: int) -> list[bool]:
    """``count`` identical searches at once, each in its own thread; whether each was a cache hit."""
    request = SearchRequest(query="kettle", mode="bm25")
    outcomes = race(*[lambda: cached_search(tenant, request).cached] * count)
    assert all(isinstance(outcome, bool) for outcome in outcomes), outcomes
    return outcomes


def first_run_held_until(monkeypatch, condition, *, every: bool = False) -> list[int]:
    """The pipeline's runs (their threads) in order; the first, the lock holder's (``every``: each run),
    starts searching only once ``condition()`` holds."""
    runs: list[int] = []
    counting = threading.Lock()

    def held_search(tenant, request, knowledge=None, **options):
        with counting:
            runs.append(threading.get_ident())
            first = len(runs) == 1
        if first or every:
            wait_until(condition, message="the other searches while the first one holds the lock")
        return search(tenant, request, knowledge)

    monkeypatch.setattr(cache, "search", held_search)
    return runs


@pytest.mark.django_db(transaction=True)
def test_concurrent_identical_misses_compute_once(tenant, monkeypatch, settings):
    settings.SEARCH_CACHE_WAIT_S = 30  # waiters never give up on the holder here
    polls = recorded_sleeps(monkeypatch, cache)  # a search waiting for the holder's answer polls
    runs = first_run_held_until(monkeypatch, lambda: len({thread for thread, _ in polls}) == 3)  # 3 wait
    cached = concurrent_searches(tenant, 4)
    assert len(runs) == 1
    assert sorted(cached) == [False, True, True, True]


@pytest.mark.django_db(transaction=True)
def test_waiters_compute_themselves_when_the_first_is_slow(tenant, monkeypatch, settings):
    settings.SEARCH_CACHE_WAIT_S = 0.1
    # Every run waits for the others: a waiter that gave up stores nothing before the last one has looked
    # (under load a late thread would otherwise find the first giver-up's answer).
    runs = first_run_held_until(monkeypatch, lambda: len(runs) == 3, every=True)  # both others gave up
    cached = concurrent_searches(tenant, 3)
    assert cached == [False, False, False]
    assert len(set(runs)) == 3


# --- Redis unavailable -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.django_db
def test_searches_still_answer_when_redis_stops(private_redis, client, caplog):
    first = post(client)
    assert post(client)["cached"] is True
    private_redis()
    for _ in range(2):
        response = post(client)
        assert response["cached"] is False
        assert response["results"] == first["results"]
    assert len([r for r in caplog.records if "search cache degraded" in r.getMessage()]) == 1


# --- round trips of a search over HTTP -------------------------------------------------------------


def sql_of(captured) -> list[str]:
    """The statements sent, but the savepoint pgvector's query takes inside the test's transaction
    (served in autocommit, it needs none)."""
    return [query["sql"] for query in captured.captured_queries if "SAVEPOINT" not in query["sql"]]


@pytest.mark.slow
@pytest.mark.django_db
def test_a_miss_reads_the_database_five_times_and_a_hit_twice(client, redis_round_trips, settings):
    """Over HTTP, hybrid, with a key the process remembers: a miss checks the API key, reads the
    searched KB versions with the tenant's vocabulary stamp (once, for the cache key and the search),
    runs pgvector, checks the BM25 hits and hydrates; the vocabulary (per stamp) and the dense leg's
    plan (per revision) are kept, not read per search. A hit makes the first two round trips only.
    Redis: the rate limit's two commands, the cache's lookup (and on a miss its store); the usage
    counters are summed in the process and sent every USAGE_COUNTERS_FLUSH_S, not per search."""
    settings.USAGE_COUNTERS_FLUSH_S = 3600  # no flush by the timer while counting
    post(client, QUERY, path="hybrid")  # connections, the vocabulary, the plan
    with CaptureQueriesContext(connection) as miss:
        before = redis_round_trips[0]
        assert post(client, {**QUERY, "query": "boiling water"}, path="hybrid")["cached"] is False
        miss_redis = redis_round_trips[0] - before
    with CaptureQueriesContext(connection) as hit:
        before = redis_round_trips[0]
        assert post(client, {**QUERY, "query": "boiling water"}, path="hybrid")["cached"] is True
        hit_redis = redis_round_trips[0] - before
    assert (len(sql_of(miss)), miss_redis, len(sql_of(hit)), hit_redis) == (5, 4, 2, 3), sql_of(miss) + sql_of(hit)
    tables = " ".join(sql_of(miss))
    assert Synonym._meta.db_table not in tables and DictionaryTerm._meta.db_table not in tables


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize("ttl", [3600, 0], ids=["cache on", "cache off"])
def test_a_synonym_added_in_the_admin_applies_to_the_next_search(client, tenant, admin_client, settings, ttl):
    settings.SEARCH_CACHE_TTL_S = ttl
    body = {"query": "boiler", "top_k": 5}
    assert post(client, body)["results"] == []
    added = admin_client.post(
        "/admin/knowledge/synonym/add/",
        {"tenant": tenant.pk, "kind": "equivalent", "terms": "boiler,kettle", "replacements": "", "weight": "0.5",
         "is_active": "on"},
    )  # fmt: skip
    assert added.status_code == 302, added.content
    assert "kettle" in post(client, body)["results"][0]["content"]


@pytest.mark.slow
@pytest.mark.django_db
def test_an_ingestion_reaches_the_next_vector_search_of_a_scope_that_was_empty(client, tenant, tmp_path, settings):
    """The dense leg keeps its plan per revision only when rows matched: an empty scope is counted again."""
    settings.SEARCH_CACHE_TTL_S = 0
    body = {**QUERY, "filters": {"doc_type": "md"}}
    assert post(client, body, path="vector")["results"] == []
    ingest(tmp_path / "manuals", tenant, {"kettle.md": KETTLE})
    assert [hit["doc_type"] for hit in post(client, body, path="vector")["results"]] == ["md"]


@pytest.mark.django_db
def test_the_versions_read_with_the_key_are_narrowed_to_the_requested_kbs(client, tenant):
    """Another tenant's KB is reported like an id that does not exist, also when read with the key."""
    kb = KnowledgeBaseFactory()
    post(client)  # the process remembers the key from here on
    own = KnowledgeBase.objects.get(tenant=tenant, name="manuals").pk
    assert {hit["kb_id"] for hit in post(client, {**QUERY, "kb_ids": [own]})["results"]} == {own}
    response = client.post(
        "/api/v1/retrieval/bm25", data=json.dumps({**QUERY, "kb_ids": [own, kb.pk]}), content_type="application/json"
    )
    assert response.status_code == 404 and response.json()["error"]["details"]["kb_ids"] == [kb.pk]
