"""The service on its production engines: the keyword leg on the run's real Elasticsearch node and the
graph on its real Neo4j (``tests.servers``), each test in indexes and graph data of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from engines import get_lexical_index, registry
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from knowledge.stores import graph_store


@pytest.fixture
def production_engines(settings, elasticsearch_url, neo4j_url) -> Iterator[None]:
    """``ELASTICSEARCH_URL`` and ``NEO4J_URL`` set as a deployment sets them, under a fresh index prefix;
    afterwards this test's indexes and graph data are dropped and the embedded engines come back."""
    settings.ELASTICSEARCH_URL = elasticsearch_url
    settings.ELASTICSEARCH_INDEX_PREFIX = f"test-prod-{uuid.uuid4().hex[:10]}"
    settings.NEO4J_URL = neo4j_url
    get_lexical_index.cache_clear()
    registry.graph_store.cache_clear()
    assert isinstance(get_lexical_index(), ElasticsearchLexicalIndex)
    assert type(graph_store()).__name__ == "Neo4jGraphStore"
    yield
    from knowledge.models import KnowledgeBaseVersion

    index = get_lexical_index()
    assert isinstance(index, ElasticsearchLexicalIndex)
    names = list(
        index.client.indices.get_alias(index=f"{settings.ELASTICSEARCH_INDEX_PREFIX}-*", expand_wildcards="all")
    )
    if names:
        index.client.options(ignore_status=404).indices.delete(index=",".join(names))
    store = graph_store()
    for tenant_id, version_id in KnowledgeBaseVersion.objects.values_list("knowledge_base__tenant_id", "pk"):
        store.drop_version(tenant_id, version_id)
    get_lexical_index.cache_clear()
    registry.graph_store.cache_clear()
