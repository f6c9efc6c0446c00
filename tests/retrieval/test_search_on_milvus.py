"""The service with ``VECTOR_BACKEND=milvus`` on Milvus Lite, end to end: ingestion writes the vectors
to Milvus, a delete and a relabel reach it, ``rebuild_vector_index`` writes it again from the chunk
rows, a filter Milvus cannot apply exactly degrades the vector leg (never a wider answer), and the
leak matrix of test_permissions.py holds with the vectors in Milvus."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from engines import registry
from knowledge.chunk_curation import edit_chunk
from knowledge.documents import delete_document, update_document_labels
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk
from knowledge.stores import vector_index
from tests.retrieval.test_permissions import corpus  # noqa: F401 (the leak matrix's corpus, ingested on Milvus)
from tests.retrieval.test_permissions import test_the_leak_matrix as leak_matrix

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

TEXTS = {
    "kettle.txt": "The kettle boils water in two minutes and switches itself off when dry.",
    "bicycle.txt": "The bicycle has eleven gears, hydraulic disc brakes and a carbon frame.",
}


@pytest.fixture
def on_milvus(settings):
    settings.VECTOR_BACKEND = "milvus"
    settings.VECTOR_EXACT_SCAN_THRESHOLD = 0  # every search with a matching row walks Milvus, none scans
    registry.clear()
    yield vector_index()
    registry.clear()


@pytest.fixture
def kb(on_milvus, tenant, tmp_path):
    kb = create_knowledge_base(tenant=tenant, name="milvus")
    for name, text in TEXTS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    Ingester(kb).ingest(discover_files([tmp_path]))
    return kb


def in_milvus(index, kb) -> set[int]:
    """The chunk ids Milvus holds for the KB's active version."""
    collection = index.ensure_collection(kb.active_version.embedding_dim)
    rows = index.client.query(collection, filter=f"version_id == {kb.active_version_id}", output_fields=["id"])
    return {row["id"] for row in rows}


def search(client, body: dict) -> dict:
    response = client.post("/api/v1/retrieval/search", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def documents_found(client, kb, query: str, **extra) -> set[str]:
    body = {"query": query, "mode": "vector", "kb_ids": [kb.pk], "top_k": 5, **extra}
    return {hit["source_uri"].rsplit("/", 1)[-1] for hit in search(client, body)["results"]}


def test_ingested_passages_are_searched_in_milvus(on_milvus, kb, api_client):
    chunks = set(Chunk.objects.filter(kb_version=kb.active_version).values_list("pk", flat=True))
    assert chunks and in_milvus(on_milvus, kb) == chunks
    body = {"query": "how fast does the kettle boil", "mode": "vector", "kb_ids": [kb.pk], "top_k": 1}
    (hit,) = search(api_client, body)["results"]
    assert hit["source_uri"].endswith("kettle.txt")


def test_a_deleted_document_leaves_milvus(on_milvus, kb, api_client):
    kettle = kb.documents.get(source_uri__endswith="kettle.txt")
    delete_document(kettle)
    assert in_milvus(on_milvus, kb) == set(
        Chunk.objects.filter(kb_version=kb.active_version).values_list("pk", flat=True)
    )
    assert documents_found(api_client, kb, "kettle boiling water") == {"bicycle.txt"}


def test_a_relabel_reaches_the_filter_fields_in_milvus(on_milvus, kb, api_client):
    bicycle = kb.documents.get(source_uri__endswith="bicycle.txt")
    assert documents_found(api_client, kb, "gears", filters={"tags": "sport"}) == set()
    update_document_labels(bicycle, tags=["sport"], metadata={"shop": 7})
    assert documents_found(api_client, kb, "gears", filters={"tags": "sport"}) == {"bicycle.txt"}
    assert documents_found(api_client, kb, "gears", filters={"metadata.shop": {"in": [7, 8]}}) == {"bicycle.txt"}
    assert documents_found(api_client, kb, "gears", filters={"not": {"tags": "sport"}}) == {"kettle.txt"}


def test_a_curated_chunk_is_searched_by_its_new_text_and_a_disabled_one_not_at_all(on_milvus, kb, api_client):
    kettle = kb.documents.get(source_uri__endswith="kettle.txt")
    (chunk_id,) = Chunk.objects.filter(document=kettle, kb_version=kb.active_version).values_list("pk", flat=True)
    edit_chunk(kettle, chunk_id, content="Emperor penguins huddle together on the Antarctic sea ice.")
    body = {"query": "penguins on the ice", "mode": "vector", "kb_ids": [kb.pk], "top_k": 1}
    (hit,) = search(api_client, body)["results"]
    assert hit["chunk_id"] == chunk_id and hit["score"] > 0.5  # the new text's vector, under the same id
    edit_chunk(kettle, chunk_id, enabled=False)
    assert chunk_id not in in_milvus(on_milvus, kb)


def test_a_filter_milvus_cannot_apply_exactly_degrades_the_vector_leg(on_milvus, kb, api_client):
    body = {"query": "gears", "kb_ids": [kb.pk], "top_k": 5, "filters": {"metadata.price": {"gt": 5}}}
    hybrid = search(api_client, {**body, "mode": "hybrid"})
    assert [(entry["stage"], entry["cause"]) for entry in hybrid["degraded"]] == [
        ("vector", "vector_filter_unsupported")
    ]
    response = api_client.post(
        "/api/v1/retrieval/search", data=json.dumps({**body, "mode": "vector"}), content_type="application/json"
    )
    assert response.status_code == 503 and response.json()["error"]["code"] == "vector_index_unavailable"


def test_rebuild_vector_index_writes_milvus_again_from_the_chunk_rows(on_milvus, kb, api_client):
    chunks = in_milvus(on_milvus, kb)
    on_milvus.client.drop_collection(on_milvus.collection(kb.active_version.embedding_dim))
    on_milvus._ready.clear()
    assert in_milvus(on_milvus, kb) == set()
    call_command("rebuild_vector_index", stdout=io.StringIO())
    assert in_milvus(on_milvus, kb) == chunks
    assert "kettle.txt" in documents_found(api_client, kb, "kettle")


def test_the_leak_matrix_holds_on_milvus(on_milvus, corpus, settings):  # noqa: F811
    leak_matrix(corpus, settings, "cache off")
