"""Global graph search (``POST /graph`` with ``"scope": "global"``) over the sample KB's communities:
ranked by BM25 and cosine over their summaries, with key entities and supporting passages, scoped to
the tenant, the KBs and the filters; a failing list degrades, a failing store is a 503."""

from __future__ import annotations

import pytest
from django.db import connection

from engines.base import Community
from engines.embedders import get_embedder
from knowledge.models import Chunk, GraphCommunity, KnowledgeBaseVersion
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import graph_store
from retrieval.graph_serializers import GlobalGraphOutput
from tests.conftest import client_for
from tests.factories import TenantFactory
from tests.retrieval.api_corpus import assert_error, post_to
from tests.retrieval.services.conftest import small_kb

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def global_search(client, query: str, **extra) -> dict:
    response = post_to(client, "graph", {"query": query, "scope": "global", **extra})
    assert response.status_code == 200, response.content
    body = response.json()
    assert GlobalGraphOutput(data=body).is_valid(), GlobalGraphOutput(data=body).errors
    assert body["total"] == len(body["communities"]) and body["request_id"] == response["X-Request-ID"]
    return body


def test_communities_come_ranked_with_summaries_key_entities_and_passages(curated_sample_kb):
    sample_kb = curated_sample_kb  # dish names are entities where a curator names them (issue 29)
    body = global_search(client_for(sample_kb.tenant), "鱼香肉丝 川菜 招牌菜", top_k=3)
    communities = body["communities"]
    assert 0 < len(communities) <= 3 and body["degraded"] == []
    assert body["candidates"] == GraphCommunity.objects.filter(kb_version=sample_kb.active_version, level=0).count()
    assert [c["rank"] for c in communities] == [1, 2, 3][: len(communities)]
    assert [c["score"] for c in communities] == sorted((c["score"] for c in communities), reverse=True)
    best = communities[0]
    assert "鱼香肉丝" in best["summary"] and set(best["retrievers"]) == {"bm25", "vector"}
    assert best["level"] == 0 and best["parent"] is None and best["kb_id"] == sample_kb.pk
    for community in communities:
        assert community["summary"].startswith("Key entities: " + ", ".join(community["key_entities"]))
        assert community["chunks"]
        for chunk in community["chunks"]:
            stored = Chunk.objects.get(pk=chunk["chunk_id"])
            assert stored.kb_version_id == sample_kb.active_version_id and stored.content == chunk["content"]
    assert set(body["timings_ms"]) >= {"graph", "bm25", "vector", "fuse", "total"}


def test_a_level_below_names_its_parents(two_levels):
    sample_kb = two_levels
    body = global_search(client_for(sample_kb.tenant), "PortaLock Pro PPR-9087 智能门锁", level=1, top_k=5)
    parents = set(
        GraphCommunity.objects.filter(kb_version=sample_kb.active_version, level=0).values_list("number", flat=True)
    )
    assert body["communities"] and all(c["level"] == 1 and c["parent"] in parents for c in body["communities"])


def test_supporting_passages_obey_the_filters(two_levels):
    client = client_for(two_levels.tenant)
    body = global_search(client, "PPR-9087-BAT 锂电池", level=1, top_k=10, filters={"doc_type": "pdf"})
    chunk_ids = [chunk["chunk_id"] for c in body["communities"] for chunk in c["chunks"]]
    assert chunk_ids
    assert set(Chunk.objects.filter(pk__in=chunk_ids).values_list("document__doc_type", flat=True)) == {"pdf"}


def test_another_tenant_sees_no_community_of_this_one(sample_kb):
    stranger = client_for(TenantFactory())
    assert global_search(stranger, "鱼香肉丝")["communities"] == []
    response = post_to(stranger, "graph", {"query": "鱼香肉丝", "scope": "global", "kb_ids": [sample_kb.pk]})
    assert response.status_code == 404


def test_an_embedder_that_fails_degrades_to_the_bm25_list(curated_sample_kb):
    sample_kb = curated_sample_kb
    KnowledgeBaseVersion.objects.filter(pk=sample_kb.active_version_id).update(embedding_model="no-such-model")
    body = global_search(client_for(sample_kb.tenant), "鱼香肉丝 川菜")
    assert [d["stage"] for d in body["degraded"]] == ["vector"]
    assert body["communities"] and all(set(c["retrievers"]) == {"bm25"} for c in body["communities"])


def test_a_graph_store_that_fails_is_a_503(sample_kb):
    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(f"ALTER TABLE {GraphCommunity._meta.db_table} RENAME TO graph_community_gone")
    response = post_to(client_for(sample_kb.tenant), "graph", {"query": "鱼香肉丝", "scope": "global"})
    assert_error(response, 503, "graph_unavailable")


@pytest.mark.parametrize("extra", [{"scope": "galactic"}, {"scope": "global", "level": 9}, {"scope": 1}])
def test_a_bad_scope_or_level_is_a_400(sample_kb, extra):
    response = post_to(client_for(sample_kb.tenant), "graph", {"query": "鱼香肉丝", **extra})
    assert_error(response, 400, "invalid_request")


PAIRING = (
    "To pair the SKY-4410 hub over Zigbee, hold its pairing button for five seconds until the ring blinks blue. "
    "The app then lists the hub under new devices; choose it and enter the code printed under the hub."
)
BATTERY = (
    "Store the lithium battery pack between 10 and 25 degrees Celsius, away from direct sunlight. "
    "A pack kept for months should be charged to half its capacity before storage."
)


def test_a_parent_child_kb_shows_each_parent_passage_once(tmp_path, embedder):
    """A community's chunks are children there: it shows their parent passages, as a search's hits do."""
    parent_child_kb = small_kb(
        tmp_path, {"hub.txt": f"{PAIRING}\n\n{BATTERY}"}, "manuals", chunking="parent_child", chunk_size=24,
        parent_chunk_size=60,
    )  # fmt: skip
    version = parent_child_kb.active_version
    children = list(Chunk.objects.filter(kb_version=version).select_related("parent").order_by("parent_id", "ordinal"))
    first_parent = [child for child in children if child.parent_id == children[0].parent_id]
    other = next(child for child in children if child.parent_id != children[0].parent_id)
    assert len(first_parent) >= 2  # two children of one parent passage
    summary = "Zigbee pairing of the hub and the battery pack"
    graph_store().replace_communities(parent_child_kb.tenant_id, version.pk, [Community(
        version_id=version.pk, level=0, number=0, parent=None, entity_ids=(), key_entities=("Zigbee",),
        summary=summary, analyzed=analyzer_for_tenant(parent_child_kb.tenant_id).analyze(summary),
        chunk_ids=tuple(child.pk for child in [*first_parent, other]),
        embedding=tuple(float(x) for x in get_embedder(version.embedding_model).embed_documents([summary])[0]),
    )])  # fmt: skip
    body = global_search(client_for(parent_child_kb.tenant), "Zigbee pairing", top_k=1)
    shown = body["communities"][0]["chunks"]
    assert [(chunk["chunk_id"], chunk["parent_id"]) for chunk in shown] == [
        (first_parent[0].pk, first_parent[0].parent_id),
        (other.pk, other.parent_id),
    ]
    assert [chunk["content"] for chunk in shown] == [first_parent[0].parent.content, other.parent.content]
