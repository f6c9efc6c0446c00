"""Parent-child chunks in a search (retrieval.services.parents): child chunks are searched, a hit returns
their parent passage, the children of one parent that match are one hit naming them; plain KBs read
nothing more. Over the real database, keyword index and model."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from graph.ranking import GraphBridge
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk, ParentChunk
from retrieval.fusion_functions import RankedList
from retrieval.services.parents import PARENT_KEY, parents_of
from tests.conftest import client_for
from tests.factories import TenantFactory
from tests.retrieval.services.conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

PAIRING = (
    "To pair the SKY-4410 hub over Zigbee, hold its pairing button for five seconds until the ring blinks blue. "
    "The app then lists the hub under new devices; choose it and enter the code printed under the hub. "
    "If Zigbee pairing fails, move the hub within two metres of the router and press the pairing button again."
)
BATTERY = (
    "Store the lithium battery pack between 10 and 25 degrees Celsius, away from direct sunlight. "
    "A pack kept for months should be charged to half its capacity before storage and checked every quarter. "
    "Never store a swollen pack: take it to a recycling point instead of charging it."
)
WARRANTY = (
    "The warranty covers manufacturing defects for 24 months from the date of purchase. "
    "Damage from water, drops or unauthorised repairs is not covered by the warranty. "
    "To claim, send the receipt and the serial number to the support address given on the box."
)


def _write(folder, name: str, text: str, **labels) -> None:
    (folder / name).write_text(text)
    if labels:
        (folder / f"{name}.meta.json").write_text(json.dumps(labels))


@pytest.fixture
def parent_child_kb(tenant, embedder, tmp_path):
    """Two manuals of three paragraphs each (a paragraph is one parent of 24-token children)."""
    kb = create_knowledge_base(
        tenant=tenant, name="manuals", chunking="parent_child", chunk_size=24, chunk_overlap=0, parent_chunk_size=120
    )
    _write(tmp_path, "hub.txt", f"{PAIRING}\n\n{WARRANTY}", tags=["hub"], metadata={"product": "hub"})
    _write(tmp_path, "battery.txt", f"{BATTERY}\n\n{WARRANTY.replace('24', '12')}", metadata={"product": "battery"})
    report = Ingester(kb).ingest(discover_files([tmp_path]))
    assert report.failed == 0 and report.added == 2
    return kb


def _pairing_hit(response):
    return next(hit for hit in response.results if "SKY-4410" in hit.content)


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_children_of_one_parent_are_one_hit_returning_the_parent(parent_child_kb, mode):
    response = run(parent_child_kb, "Zigbee pairing button of the hub", mode=mode, top_k=10)
    hit = response.results[0]
    assert hit.content == PAIRING  # the parent passage, not the child that matched
    parent = ParentChunk.objects.get(pk=hit.parent_id)
    assert parent.content == PAIRING and parent.document_id == hit.doc_id
    children = {child["chunk_id"] for child in hit.children}
    assert len(children) >= 2 and hit.chunk_id in children  # several children matched, the hit's is one of them
    assert all(set(child["retrievers"]) <= {"vector", "bm25"} and child["retrievers"] for child in hit.children)
    assert {child["ordinal"] for child in hit.children} <= set(
        parent.children.values_list("ordinal", flat=True)
    )  # each named child is one of this parent's
    # One hit per parent: no other hit returns this passage.
    assert [h.parent_id for h in response.results].count(hit.parent_id) == 1
    # The hit's rank per retriever is its best child's.
    for retriever, contribution in hit.retrievers.items():
        ranks = [child["retrievers"][retriever]["rank"] for child in hit.children if retriever in child["retrievers"]]
        assert contribution["rank"] == min(ranks)


def test_a_child_only_a_graph_bridge_reached_counts_as_its_parent(parent_child_kb):
    """Fusion keys the graph's bridges by content hash: a bridged child no ranked list holds gets its
    parent's key too (``parents_of`` reads the bridges' chunks), so it cannot come back beside its parent."""
    children = list(Chunk.objects.filter(knowledge_base=parent_child_kb).order_by("id"))
    listed, bridged = children[0], next(c for c in children[1:] if c.parent_id == children[0].parent_id)
    lists = [RankedList("bm25", "q", 1.0, [(listed.pk, 1.0)])]
    parents = parents_of(parent_child_kb.tenant, lists, True, [GraphBridge(listed.pk, bridged.pk, 1.0, "SKY-4410")])
    assert parents.keys[bridged.pk] == parents.keys[listed.pk] == PARENT_KEY + listed.parent.content_hash
    assert bridged.pk not in parents_of(parent_child_kb.tenant, lists, True).keys  # the lists alone


def test_identical_parents_are_one_hit(parent_child_kb, tmp_path):
    _write(tmp_path, "hub-copy.txt", PAIRING)  # the same passage in another document
    assert Ingester(parent_child_kb).ingest(discover_files([tmp_path])).added == 1
    response = run(parent_child_kb, "Zigbee pairing button of the hub", mode="hybrid", top_k=10)
    assert [hit.content for hit in response.results].count(PAIRING) == 1
    # The two warranty paragraphs differ in their months: different passages, two hits.
    response = run(parent_child_kb, "What does the warranty not cover?", mode="bm25", top_k=10)
    warranties = [hit for hit in response.results if "warranty covers" in hit.content]
    assert len(warranties) == 2 and len({hit.content for hit in warranties}) == 2


def test_filters_and_the_tenant_scope_parent_child_hits(parent_child_kb):
    query = "warranty claim receipt"
    hub_only = run(parent_child_kb, query, mode="hybrid", top_k=10, filters={"metadata.product": "hub"})
    assert hub_only.results and {hit.source_uri.rsplit("/", 1)[-1] for hit in hub_only.results} == {"hub.txt"}
    tagged = run(parent_child_kb, query, mode="bm25", top_k=10, filters={"tags": "hub"})
    assert tagged.results and all(hit.metadata["tags"] == ["hub"] for hit in tagged.results)
    other = TenantFactory()
    create_knowledge_base(tenant=other, name="manuals", chunking="parent_child", chunk_size=24, chunk_overlap=0)
    assert run(other, query, mode="hybrid").results == []


def test_the_api_and_dify_return_the_parent_passage(parent_child_kb):
    client = client_for(parent_child_kb.tenant)
    body = {"query": "Zigbee pairing button", "top_k": 3, "kb_ids": [parent_child_kb.pk]}
    response = client.post("/api/v1/retrieval/hybrid", body, format="json")
    assert response.status_code == 200, response.content
    hit = response.json()["results"][0]
    assert hit["content"] == PAIRING and hit["parent_id"] and len(hit["children"]) >= 2
    assert {"chunk_id", "ordinal", "retrievers"} == set(hit["children"][0])
    dify = {"knowledge_id": str(parent_child_kb.pk), "query": "Zigbee pairing button",
            "retrieval_setting": {"top_k": 3, "score_threshold": 0.0}}  # fmt: skip
    records = client.post("/api/v1/dify/retrieval", dify, format="json").json()["records"]
    assert records[0]["content"] == PAIRING
    assert len([record for record in records if record["content"] == PAIRING]) == 1


def test_reranking_a_parent_child_search_keeps_one_hit_per_parent(parent_child_kb, rerank_server):
    response = run(parent_child_kb, "Zigbee pairing button", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is True and response.degraded == []
    parents = [hit.parent_id for hit in response.results]
    assert len(parents) == len(set(parents)) and None not in parents
    assert _pairing_hit(response).rerank_score is not None


def test_a_plain_kb_reads_no_parent_and_its_hits_name_none(sample_kb):
    with CaptureQueriesContext(connection) as queries:
        response = run(sample_kb, "lithium battery pack storage", mode="hybrid", top_k=10)
    assert response.results
    assert not [query for query in queries.captured_queries if ParentChunk._meta.db_table in query["sql"]]
    assert all(hit.parent_id is None and hit.children is None for hit in response.results)
