"""The graph on Neo4j answers like the graph in PostgreSQL: the same corpus ingested once into each
store (the multi-hop set with its curated vocabulary, and the sample KB), then every multi-hop query
and the sample's graph queries searched in graph mode on both. Each query must find the same entities,
reach the same passages in the same order, by the same paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from engines import get_lexical_index, registry
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.stores import graph_store
from knowledge.vocabulary import seed_vocabulary
from retrieval.evaluation.datasets import corpus_files, load_dataset
from retrieval.services.search import search
from retrieval.types import SearchRequest
from tests.factories import TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MULTIHOP = Path(settings.BASE_DIR) / "bench" / "multihop"
SAMPLE = Path(settings.BASE_DIR) / "sample_kb"
SAMPLE_QUERIES = ["蜀香小馆", "鱼香肉丝", "PPR-9087", "Skyline Home", "Shuxiang Bistro partner program", "E-221"]


def answers(files, queries: list[str], vocabulary: Path | None) -> dict[str, list[tuple]]:
    """Each query's graph hits as (source, passage text, matched entities, path, hops): nothing that
    depends on the store's own ids."""
    tenant = TenantFactory()
    if vocabulary is not None:
        seed_vocabulary(tenant, vocabulary)
    kb = create_knowledge_base(tenant=tenant, name="parity")
    Ingester(kb).ingest(files)
    kb.refresh_from_db()
    found = {}
    for query in queries:
        response = search(tenant, SearchRequest(query=query, mode="graph", top_k=10, kb_ids=[kb.pk], hops=2))
        assert response.degraded == [], response.degraded
        found[query] = [
            (
                hit.source_uri.rsplit("/", 1)[-1],
                hit.content,
                tuple(hit.retrievers["graph"].get("entities", ())),
                tuple(hit.retrievers["graph"].get("path", ())),
                hit.retrievers["graph"].get("hops"),
            )
            for hit in response.results
        ]
    return found


def on_neo4j(settings, neo4j_url: str) -> None:
    settings.NEO4J_URL = neo4j_url
    registry.graph_store.cache_clear()


@pytest.fixture
def stores(settings, neo4j_url, embedder):
    """Runs ``answers`` on PostgreSQL's tables, then on Neo4j; Neo4j's data of this test dropped after."""

    def both(files, queries, vocabulary=None):
        registry.graph_store.cache_clear()
        postgres = answers(files, queries, vocabulary)
        on_neo4j(settings, neo4j_url)
        neo4j = answers(files, queries, vocabulary)
        return postgres, neo4j

    yield both
    from knowledge.models import KnowledgeBaseVersion

    if settings.NEO4J_URL:
        for tenant_id, version_id in KnowledgeBaseVersion.objects.values_list("knowledge_base__tenant_id", "pk"):
            graph_store().drop_version(tenant_id, version_id)
    settings.NEO4J_URL = ""
    registry.graph_store.cache_clear()
    get_lexical_index.cache_clear()


def assert_same(postgres: dict, neo4j: dict) -> None:
    assert any(postgres.values()), "the graph found something"
    for query in postgres:
        assert neo4j[query] == postgres[query], query


def test_the_multihop_set_answers_alike_on_both_graph_stores(stores):
    dataset = load_dataset(MULTIHOP, "test")
    postgres, neo4j = stores(corpus_files(dataset), list(dataset.queries.values()), MULTIHOP / "vocabulary")
    assert_same(postgres, neo4j)


def test_the_sample_kb_answers_alike_on_both_graph_stores(stores):
    postgres, neo4j = stores(discover_files([SAMPLE]), SAMPLE_QUERIES, SAMPLE / ".vocabulary")
    assert_same(postgres, neo4j)
