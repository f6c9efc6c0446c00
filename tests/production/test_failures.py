"""Failures of the production engines' real processes degrade a search, never break it: Elasticsearch
or Neo4j frozen (SIGSTOP), killed, or answering errors in the middle of searches. The leg becomes a
``degraded`` entry within the search deadline, the other legs answer, the sole retriever of a mode
failing is a 503 with a code (never a 500), and once the server is back searches recover with no
restart of the service. Each test runs on servers of its own, so stopping them disturbs no other test."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from engines import get_lexical_index, registry
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from tests.conftest import client_for
from tests.servers import elasticsearch, neo4j, process

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUERY = "PPR-9087 lock door thickness"


def own_server(name: str, start) -> Iterator[tuple[process.Server, str]]:
    try:
        server, url = start(f"{name}-faults")
    except process.ServerUnavailable as exc:
        pytest.skip(f"no {name} server for the tests: {exc}")
    yield server, url
    server.stop()


@pytest.fixture(scope="module")
def own_elasticsearch() -> Iterator[tuple[process.Server, str]]:
    yield from own_server("elasticsearch", elasticsearch.start)


@pytest.fixture(scope="module")
def own_neo4j() -> Iterator[tuple[process.Server, str]]:
    yield from own_server("neo4j", neo4j.start)


@pytest.fixture
def kb(settings, tenant, embedder, own_elasticsearch, own_neo4j, tmp_path):
    """A KB ingested into this module's servers."""
    settings.ELASTICSEARCH_URL = own_elasticsearch[1]
    settings.ELASTICSEARCH_INDEX_PREFIX = f"faults-{tenant.pk}"
    settings.NEO4J_URL = own_neo4j[1]
    settings.SEARCH_CACHE_TTL_S = 0
    get_lexical_index.cache_clear()
    registry.graph_store.cache_clear()
    try:  # the engines built on this module's servers are forgotten, also when the setup fails
        kb = create_knowledge_base(tenant=tenant, name="faults", chunk_size=120, chunk_overlap=16)
        (tmp_path / "lock.md").write_text("# PPR-9087 lock\n\nThe PPR-9087 smart lock fits doors 35 to 80 mm thick.")
        (tmp_path / "kettle.txt").write_text("The KT-2210 kettle boils 1.7 litres of water in four minutes.")
        Ingester(kb).ingest(discover_files([tmp_path]))
        yield kb
    finally:
        get_lexical_index.cache_clear()
        registry.graph_store.cache_clear()


def post(kb, mode: str, **body):
    client = client_for(kb.tenant)
    payload = {"query": QUERY, "top_k": 3, "kb_ids": [kb.pk], "rerank": False, **body}
    return client.post(f"/api/v1/retrieval/{mode}", data=json.dumps(payload), content_type="application/json")


def degraded(response) -> dict[str, str]:
    assert response.status_code == 200, response.content
    assert response.json()["results"], "the other legs answer"
    return {entry["stage"]: entry["cause"] for entry in response.json()["degraded"]}


def assert_unavailable(response, code: str) -> None:
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == code


def assert_recovered(kb, tries: int = 20) -> None:
    """Searches answer whole again, with no restart of the service. A server just (re)started answers
    its first queries slowly (cold caches, a new connection): a bounded number of tries, not a wait."""
    for _ in range(tries):
        if degraded(post(kb, "hybrid", graph=True)) == {}:
            break
        time.sleep(0.5)
    assert degraded(post(kb, "hybrid", graph=True)) == {}
    assert post(kb, "bm25").json()["results"]


def test_a_frozen_elasticsearch_degrades_the_keyword_leg_within_the_deadline(kb, own_elasticsearch):
    server, _ = own_elasticsearch
    assert_recovered(kb)
    server.freeze()
    try:
        assert degraded(post(kb, "hybrid")) == {"bm25": "deadline"}
        assert_unavailable(post(kb, "bm25"), "lexical_index_unavailable")
    finally:
        server.thaw()
    assert_recovered(kb)


def test_elasticsearch_answering_errors_degrades_the_keyword_leg(kb):
    index = get_lexical_index()
    assert isinstance(index, ElasticsearchLexicalIndex)
    alias = f"{index.prefix}-kbv-{kb.active_version_id}"
    index.client.indices.close(index=alias)  # every search of it now answers 400 index_closed_exception
    try:
        assert set(degraded(post(kb, "hybrid"))) == {"bm25"}
        assert_unavailable(post(kb, "bm25"), "lexical_index_unavailable")
    finally:
        index.client.indices.open(index=alias, wait_for_active_shards="1")
    assert_recovered(kb)


def test_a_frozen_neo4j_degrades_the_graph_leg_within_the_deadline(kb, own_neo4j):
    server, _ = own_neo4j
    assert_recovered(kb)
    server.freeze()
    try:
        assert degraded(post(kb, "hybrid", graph=True)) == {"graph": "deadline"}
        assert_unavailable(post(kb, "graph"), "graph_unavailable")
    finally:
        server.thaw()
    assert_recovered(kb)


def test_a_killed_elasticsearch_degrades_until_it_is_back(kb, own_elasticsearch):
    server, _ = own_elasticsearch
    assert_recovered(kb)
    server.freeze()  # no answers, then no process at all: connections refused
    server.kill()
    try:
        assert set(degraded(post(kb, "hybrid"))) == {"bm25"}
        assert_unavailable(post(kb, "bm25"), "lexical_index_unavailable")
    finally:
        server.restart()
    assert_recovered(kb)  # the same index, on disk, served again: no restart of the service


def test_a_killed_neo4j_degrades_until_it_is_back(kb, own_neo4j):
    server, _ = own_neo4j
    assert_recovered(kb)
    server.kill()
    try:
        assert set(degraded(post(kb, "hybrid", graph=True))) == {"graph"}
        assert_unavailable(post(kb, "graph"), "graph_unavailable")
    finally:
        server.restart()
    assert_recovered(kb)
