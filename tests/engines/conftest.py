"""Fixtures of the engines' tests: the lexical contract's backends (tantivy, and Elasticsearch on the
run's real node) and the recording Elasticsearch fake; the rerank server and its clients."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from engines.base import LexicalIndex
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from engines.rerankers.remote import RemoteReranker
from engines.tantivy_index import TantivyLexicalIndex
from tests.engines.lexical_support import (
    K1,
    Backend,
    FakeElasticsearch,
)
from tests.engines.rerank_support import RerankServer


@pytest.fixture(params=["tantivy", "elasticsearch"])
def backend(request, tmp_path) -> Iterator[Backend]:
    if request.param == "tantivy":
        yield Backend("tantivy", lambda: TantivyLexicalIndex(tmp_path / "lexical"), scale=K1 + 1)
        return
    url = request.getfixturevalue("elasticsearch_url")  # the run's real node (tests.servers)
    prefix = f"test-lexical-{uuid.uuid4().hex[:12]}"
    yield Backend(
        "elasticsearch", lambda: ElasticsearchLexicalIndex(url, prefix=prefix), scale=K1 + 1, overwrites_ids=True
    )
    client = ElasticsearchLexicalIndex(url, prefix=prefix).client
    names = list(client.indices.get_alias(index=f"{prefix}-*", expand_wildcards="all"))
    if names:
        client.options(ignore_status=404).indices.delete(index=",".join(names))


@pytest.fixture
def index(backend) -> LexicalIndex:
    return backend.open()


@pytest.fixture
def fake() -> Iterator[FakeElasticsearch]:
    with FakeElasticsearch() as fake:
        yield fake


@pytest.fixture
def overlap_server():
    """The remote reranker tests' server (``rerank_support.RerankServer``: replies set per test, requests
    counted); the root conftest's ``rerank_server`` is the one a search's settings point to."""
    with RerankServer() as running:
        yield running


@pytest.fixture
def make_reranker(overlap_server):
    """RemoteRerankers on the test server, with short waits, closed at teardown."""
    made: list[RemoteReranker] = []

    def make(url: str | None = None, **kwargs) -> RemoteReranker:
        kwargs.setdefault("backoff_s", 0.01)
        reranker = RemoteReranker(url or overlap_server.url, **kwargs)
        made.append(reranker)
        return reranker

    yield make
    for reranker in made:
        reranker.close()
