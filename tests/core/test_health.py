"""/health, /ready (each check, and which one failed) and /api/v1/stats. (Degraded searches through the
API, with really broken engines: tests/retrieval/test_views_degradation.py.)"""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError

from core import health
from core.usage import query_usage
from engines import get_lexical_index
from engines.base import LexicalIndexError
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from engines.tantivy_index import TantivyLexicalIndex
from tests.concurrency import wait_until
from tests.conftest import client_for
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory, TenantFactory

CHECK_NAMES = {"database", "pgvector", "cache", "lexical_index", "embedder", "graph_store", "vector_index"}


def failed(message: str) -> dict:
    return {"ok": False, "required": True, "message": message}


def ready(client) -> tuple[int, dict]:
    response = client.get("/ready")
    return response.status_code, response.json()


@pytest.fixture
def fresh_warm_up(monkeypatch) -> health.EmbedderWarmUp:
    """A warm-up with no history, so one test's failed load does not leak into another."""
    warm_up = health.EmbedderWarmUp()
    monkeypatch.setattr(health, "embedder_warm_up", warm_up)
    return warm_up


# === /health ========================================================================================


def test_health_answers_without_the_database(client):
    """No ``db`` fixture: any query would raise, so this also proves liveness never touches the database."""
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


# === /ready =========================================================================================


@pytest.mark.django_db
def test_ready_when_every_check_passes(client, embedder):
    status, body = ready(client)
    assert status == 200, body
    assert body["status"] == "ready"
    assert set(body["checks"]) == CHECK_NAMES
    assert all(check["ok"] and check["message"] for check in body["checks"].values())
    assert body["checks"]["pgvector"]["message"].startswith("pgvector 0.")
    assert body["checks"]["embedder"]["message"] == "all-MiniLM-L6-v2 loaded"
    assert body["checks"]["graph_store"] == {"ok": True, "required": False, "message": "postgres graph tables"}
    assert body["checks"]["vector_index"] == {"ok": True, "required": True, "message": "pgvector"}


@pytest.mark.django_db
def test_a_graph_store_that_cannot_serve_is_degraded_and_named(client, embedder):
    from django.db import connection

    from knowledge.models import GraphEntity

    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(f"ALTER TABLE {GraphEntity._meta.db_table} RENAME TO graph_entity_gone")
    status, body = ready(client)
    assert status == 200 and body["status"] == "degraded", body
    graph = body["checks"]["graph_store"]
    assert graph["ok"] is False and graph["required"] is False and "graph tables cannot be read" in graph["message"]
    assert all(check["ok"] for name, check in body["checks"].items() if name != "graph_store")


@pytest.mark.django_db
def test_a_database_outage_is_not_ready_and_named(client, embedder, monkeypatch):
    class Unreachable:
        def cursor(self):
            raise OperationalError("connection refused")

    monkeypatch.setattr(health, "connection", Unreachable())
    status, body = ready(client)
    assert status == 503 and body["status"] == "not_ready"
    for name in ("database", "pgvector"):
        assert body["checks"][name] == failed("OperationalError: connection refused")
    assert body["checks"]["lexical_index"]["ok"] and body["checks"]["embedder"]["ok"]


@pytest.mark.django_db
def test_a_database_without_pgvector_is_not_ready(client, embedder, monkeypatch):
    class NoVectorCursor:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, sql):
            pass

        def fetchone(self):
            return None

    class NoVector:
        def cursor(self):
            return NoVectorCursor()

    monkeypatch.setattr(health, "connection", NoVector())
    status, body = ready(client)
    assert status == 503
    assert body["checks"]["database"]["ok"]
    assert body["checks"]["pgvector"] == failed("the vector extension is not installed (run migrate)")


@pytest.fixture
def unreachable_redis(settings) -> None:
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "unix:///nonexistent/redis.sock",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        }
    }


@pytest.mark.django_db
def test_a_redis_outage_is_degraded_while_rate_limits_fail_open(client, embedder, settings, unreachable_redis):
    settings.RATE_LIMIT_FAIL_OPEN = True
    status, body = ready(client)
    assert status == 200 and body["status"] == "degraded"
    cache = body["checks"]["cache"]
    assert cache["ok"] is False and cache["required"] is False and "Error" in cache["message"]


@pytest.mark.django_db
def test_a_redis_outage_is_not_ready_when_rate_limits_fail_closed(client, embedder, settings, unreachable_redis):
    settings.RATE_LIMIT_FAIL_OPEN = False
    status, body = ready(client)
    assert status == 503 and body["status"] == "not_ready"
    assert body["checks"]["cache"]["required"] is True and body["checks"]["cache"]["ok"] is False


@pytest.fixture
def unwritable_lexical_root(settings, tmp_path):
    """The tantivy root under a regular file: no index can ever be written there (even as root)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    settings.LEXICAL_INDEX_DIR = blocker / "lexical"
    get_lexical_index.cache_clear()
    yield settings.LEXICAL_INDEX_DIR
    get_lexical_index.cache_clear()  # the next caller builds the index on the restored setting


@pytest.mark.django_db
def test_an_unwritable_keyword_index_is_not_ready(client, embedder, unwritable_lexical_root):
    status, body = ready(client)
    assert status == 503
    check = body["checks"]["lexical_index"]
    assert check["ok"] is False and "LexicalIndexError" in check["message"]
    assert str(unwritable_lexical_root) in check["message"]


def test_tantivy_ping_accepts_a_root_that_does_not_exist_yet(tmp_path):
    assert "writable" in TantivyLexicalIndex(tmp_path / "a" / "b").ping()


def test_elasticsearch_ping_reports_an_unreachable_server():
    index = ElasticsearchLexicalIndex("http://127.0.0.1:9", request_timeout_s=0.5, max_retries=0)
    with pytest.raises(LexicalIndexError) as failure:
        index.ping()
    assert failure.value.cause == "connection_error"


@pytest.mark.django_db
def test_ready_never_waits_for_the_model_it_reports_loading(client, settings, monkeypatch, fresh_warm_up):
    """The load only ends once the test releases it, after the answer: the answer cannot have waited."""
    release, loaded = threading.Event(), threading.Event()
    monkeypatch.setattr(health.EmbedderWarmUp, "_load", lambda self: (release.wait(60), loaded.set()))
    settings.EMBEDDING_MODEL = "model-not-loaded-yet"
    try:
        status, body = ready(client)
        assert not loaded.is_set()
        assert status == 503
        assert body["checks"]["embedder"] == failed("model-not-loaded-yet is loading")
    finally:
        release.set()


@pytest.mark.django_db
def test_a_model_that_cannot_load_is_reported_with_its_error(client, settings, fresh_warm_up):
    settings.EMBEDDING_MODEL = "/nonexistent/model-folder"

    def reported_unloadable():  # reported loading first, while the warm-up thread tries
        status, body = ready(client)
        message = body["checks"]["embedder"]["message"]
        return (status, message) if "cannot be loaded" in message else None

    status, message = wait_until(reported_unloadable, interval=0.05, message="the failed load to be reported")
    assert status == 503
    assert "cannot be loaded" in message and "unknown embedding model" in message


# === /api/v1/stats ==================================================================================


@pytest.mark.django_db
def test_stats_count_the_callers_tenant_only(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    KnowledgeBaseFactory(tenant=tenant)
    ready_doc = DocumentFactory(knowledge_base=kb)
    DocumentFactory(knowledge_base=kb)
    DocumentFactory(knowledge_base=kb, status="failed")
    ChunkFactory.create_batch(3, document=ready_doc)
    ChunkFactory(document=DocumentFactory(knowledge_base=KnowledgeBaseFactory(tenant=TenantFactory())))

    response = client_for(tenant).get("/api/v1/stats")
    assert response.status_code == 200, response.content
    stats = response.json()
    cost = stats.pop("cost")  # nothing searched or ingested through the meter: no day, nothing charged
    assert cost["days"] == 30 and cost["daily"] == [] and cost["total"]["amount"] == 0
    assert set(cost["total"]["units"].values()) == {0}
    assert stats == {
        "tenant": tenant.name,
        "knowledge_bases": 2,
        "documents": {"total": 3, "by_status": {"pending": 0, "ready": 2, "failed": 1, "removed": 0}},
        "chunks": 3,
        "queries": {"served": 0, "cache_hits": 0, "cache_hit_ratio": None},
    }


@pytest.mark.django_db
def test_stats_count_served_queries_and_cache_hits(tenant):
    KnowledgeBaseFactory(tenant=tenant)
    client = client_for(tenant)
    bodies = [client.post("/api/v1/retrieval/bm25", {"query": "refund"}, format="json").json() for _ in range(3)]
    client.post("/api/v1/retrieval/bm25", {"query": ""}, format="json")  # a 400 is not a query served
    hits = sum(bool(body.get("cached")) for body in bodies)

    queries = client.get("/api/v1/stats").json()["queries"]
    assert queries == {"served": 3, "cache_hits": hits, "cache_hit_ratio": round(hits / 3, 4)}
    assert client_for(TenantFactory()).get("/api/v1/stats").json()["queries"]["served"] == 0


@pytest.mark.django_db
def test_stats_report_null_queries_while_redis_is_down(tenant, unreachable_redis, settings):
    settings.RATE_LIMIT_FAIL_OPEN = True
    response = client_for(tenant).get("/api/v1/stats")
    assert response.status_code == 200, response.content
    assert response.json()["queries"] is None


def test_stats_need_an_api_key(client, db):
    response = client.get("/api/v1/stats")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_api_key"


@pytest.mark.django_db
def test_graph_searches_are_counted_like_every_other_mode(tenant):
    """``/graph`` (local and global scope) counts as ``/search`` with ``"mode": "graph"`` does."""
    KnowledgeBaseFactory(tenant=tenant)
    client = client_for(tenant)
    answers = [
        client.post("/api/v1/retrieval/graph", {"query": "kettle"}, format="json"),
        client.post("/api/v1/retrieval/graph", {"query": "kettle", "scope": "global"}, format="json"),
        client.post("/api/v1/retrieval/search", {"query": "kettle", "mode": "graph"}, format="json"),
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 200], [a.content for a in answers]
    assert client.get("/api/v1/stats").json()["queries"]["served"] == 3
    numbers = query_usage(tenant.pk, days=1)
    assert numbers["daily"][-1]["modes"] == {"graph": 3} and numbers["top_queries"] == [("kettle", 3)]


@pytest.mark.django_db
def test_milvus_answering_is_ready_and_milvus_unreachable_is_not(client, embedder, settings):
    from engines import registry

    settings.VECTOR_BACKEND = "milvus"
    registry.clear()
    try:
        status, body = ready(client)
        assert status == 200 and body["checks"]["vector_index"]["message"].startswith("Milvus "), body
        settings.MILVUS_URI, settings.MILVUS_TIMEOUT_S = "http://127.0.0.1:1", 1.0
        registry.clear()
        status, body = ready(client)
        check = body["checks"]["vector_index"]
        assert status == 503 and check["ok"] is False and "Fail connecting" in check["message"], body
    finally:
        registry.clear()
