"""The knowledge REST API over real HTTP handling, the real database and, for uploads, a real worker."""
import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from knowledge.models import Document
from tenants.services import create_api_key
from tests.factories import KnowledgeBaseFactory, TenantFactory

pytestmark = [pytest.mark.slow]


def client_with(tenant, *scopes: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_key(tenant=tenant, scopes=scopes).raw_key}")
    return client


@pytest.fixture
def writer(tenant) -> APIClient:
    return client_with(tenant, "ingest", "search")


def upload(client, kb_id, *files, **fields):
    return client.post(f"/api/v1/knowledge-bases/{kb_id}/documents", {"files": list(files), **fields}, format="multipart")


def text_file(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/plain")


def poll(client, status_url: str, timeout_s: float = 120) -> list[dict]:
    """Every distinct answer of the task's status until it ends."""
    answers, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = client.get(status_url)
        assert response.status_code == 200, response.content
        body = response.json()
        if not answers or answers[-1] != body:
            answers.append(body)
        if body["state"] in ("SUCCESS", "FAILURE"):
            return answers
        time.sleep(0.05)
    raise AssertionError(f"the task did not end within {timeout_s} s: {answers[-1]}")


# --- knowledge bases ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_list_and_read_knowledge_bases(writer, tenant, embedder):
    response = writer.post("/api/v1/knowledge-bases", {"name": "handbook", "chunk_size": 120}, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["name"], created["chunk_size"], created["active_version"]) == ("handbook", 120, 1)
    assert (created["embedding_model"], created["embedding_dim"]) == (embedder.model_name, embedder.dimension)
    assert created["chunk_overlap"] <= 60 and created["document_count"] == 0

    reader = client_with(tenant, "search")
    listed = reader.get("/api/v1/knowledge-bases").json()
    assert [kb["id"] for kb in listed["results"]] == [created["id"]] and listed["count"] == 1
    assert reader.get(f"/api/v1/knowledge-bases/{created['id']}").json() == created


@pytest.mark.django_db
def test_knowledge_base_errors_are_json(writer, tenant, embedder):
    other = KnowledgeBaseFactory(tenant=TenantFactory())
    missing = writer.get(f"/api/v1/knowledge-bases/{other.pk}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "knowledge_base_not_found")
    assert writer.post("/api/v1/knowledge-bases", {"name": "a"}, format="json").status_code == 201
    duplicate = writer.post("/api/v1/knowledge-bases", {"name": "a"}, format="json")
    assert (duplicate.status_code, duplicate.json()["error"]["code"]) == (409, "knowledge_base_exists")
    unknown_model = writer.post("/api/v1/knowledge-bases", {"name": "b", "embedding_model": "/no/such/model"}, format="json")
    assert (unknown_model.status_code, unknown_model.json()["error"]["code"]) == (400, "invalid_embedding_model")
    invalid = writer.post("/api/v1/knowledge-bases", {"name": "", "chunk_size": 0}, format="json")
    assert (invalid.status_code, invalid.json()["error"]["code"]) == (400, "invalid_request")
    assert set(invalid.json()["error"]["details"]) == {"name", "chunk_size"}


@pytest.mark.django_db
def test_writes_need_the_ingest_scope_and_reads_search_or_ingest(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    search_only, ingest_only = client_with(tenant, "search"), client_with(tenant, "ingest")
    refused = search_only.post("/api/v1/knowledge-bases", {"name": "x"}, format="json")
    assert (refused.status_code, refused.json()["error"]["details"]) == (403, {"required_scope": "ingest"})
    assert upload(search_only, kb.pk, text_file("a.txt", "hello")).status_code == 403
    assert ingest_only.get(f"/api/v1/knowledge-bases/{kb.pk}/documents").status_code == 200
    admin_only = client_with(tenant, "admin").get(f"/api/v1/knowledge-bases/{kb.pk}")
    assert (admin_only.status_code, admin_only.json()["error"]["code"]) == (403, "insufficient_scope")


@pytest.mark.django_db
def test_knowledge_requests_are_rate_limited_per_tier(tenant):
    tier = tenant.rate_tier
    tier.endpoint_limits = {**tier.endpoint_limits, "knowledge": 2}
    tier.save()
    reader = client_with(tenant, "search")
    statuses = [reader.get("/api/v1/knowledge-bases").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


# --- uploads -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_too_large_uploads_are_413_json(writer, tenant, settings):
    kb = KnowledgeBaseFactory(tenant=tenant)
    settings.UPLOAD_MAX_FILE_BYTES = 10
    response = upload(writer, kb.pk, text_file("big.txt", "x" * 11))
    assert (response.status_code, response.json()["error"]["code"]) == (413, "payload_too_large")
    assert "big.txt" in response.json()["error"]["message"]
    settings.UPLOAD_MAX_FILE_BYTES, settings.UPLOAD_MAX_REQUEST_BYTES = 1000, 100
    response = upload(writer, kb.pk, text_file("small.txt", "x" * 50), text_file("other.txt", "y" * 50))
    assert (response.status_code, response.json()["error"]["code"]) == (413, "payload_too_large")
    assert not Document.objects.filter(knowledge_base=kb).exists()


@pytest.mark.django_db
def test_bad_upload_fields_are_400(writer, tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    no_files = writer.post(f"/api/v1/knowledge-bases/{kb.pk}/documents", {}, format="multipart")
    assert (no_files.status_code, no_files.json()["error"]["code"]) == (400, "invalid_request")
    bad_labels = upload(writer, kb.pk, text_file("a.txt", "hello"), metadata=json.dumps({"tags": "not-a-list"}))
    assert bad_labels.status_code == 400 and "tags" in bad_labels.json()["error"]["message"]
    not_json = upload(writer, kb.pk, text_file("a.txt", "hello"), metadata="{oops")
    assert not_json.status_code == 400
    twice = upload(writer, kb.pk, text_file("a.txt", "one"), text_file("a.txt", "two"))
    assert twice.status_code == 400 and "unique" in twice.json()["error"]["message"]
    assert not Document.objects.filter(knowledge_base=kb).exists()


@pytest.mark.django_db(transaction=True)
def test_upload_poll_search_and_delete(celery_worker, tenant, writer):
    kb = writer.post("/api/v1/knowledge-bases", {"name": "manuals"}, format="json").json()
    labels = {"tags": ["manual"], "metadata": {"shop_id": 7}}
    response = upload(
        writer,
        kb["id"],
        text_file("lock.md", "# PPR-9087 lock\n\nThe PPR-9087 lock fits doors 35 to 80 mm thick."),
        text_file("kettle.txt", "The kettle boils 1.7 litres of water in four minutes."),
        SimpleUploadedFile("broken.pdf", b"%PDF-1.4 not a pdf", content_type="application/pdf"),
        SimpleUploadedFile("photo.png", b"\x89PNG", content_type="image/png"),
        metadata=json.dumps(labels),
    )
    assert response.status_code == 202, response.content
    queued = response.json()
    statuses = {doc["name"]: doc["status"] for doc in queued["documents"]}
    assert statuses == {"lock.md": "pending", "kettle.txt": "pending", "broken.pdf": "pending", "photo.png": "failed"}
    assert queued["status_url"] == f"/api/v1/tasks/{queued['task_id']}"

    answers = poll(writer, queued["status_url"])
    final = answers[-1]
    assert final["state"] == "SUCCESS", final
    assert final["progress"] == {"done": 3, "total": 3, "unit": "documents"}
    assert (final["result"]["added"], final["result"]["failed"]) == (2, 1)
    for answer in answers[:-1]:  # every earlier answer is a state on the way, never an error
        assert answer["state"] in ("PENDING", "STARTED", "PROGRESS") and answer["error"] is None

    documents = {doc["name"]: doc for doc in writer.get(f"/api/v1/knowledge-bases/{kb['id']}/documents").json()["results"]}
    assert {name: doc["status"] for name, doc in documents.items()} == {
        "lock.md": "ready", "kettle.txt": "ready", "broken.pdf": "failed", "photo.png": "failed",
    }  # fmt: skip
    assert "unsupported" in documents["photo.png"]["error"] and documents["broken.pdf"]["error"]
    assert (documents["lock.md"]["tags"], documents["lock.md"]["metadata"]) == (["manual"], {"shop_id": 7})
    lock = documents["lock.md"]
    assert writer.get(f"/api/v1/knowledge-bases/{kb['id']}/documents/{lock['id']}").json() == lock

    def bm25_hits() -> list[int]:
        body = {"query": "PPR-9087 lock", "kb_ids": [kb["id"]], "filters": {"metadata.shop_id": 7}}
        response = writer.post("/api/v1/retrieval/bm25", body, format="json")
        assert response.status_code == 200, response.content
        return [hit["doc_id"] for hit in response.json()["results"]]

    assert lock["id"] in bm25_hits()
    assert writer.delete(f"/api/v1/knowledge-bases/{kb['id']}/documents/{lock['id']}").status_code == 204
    assert lock["id"] not in bm25_hits()
    gone = writer.get(f"/api/v1/knowledge-bases/{kb['id']}/documents/{lock['id']}")
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "document_not_found")


@pytest.mark.django_db
def test_a_task_is_visible_to_its_tenant_only(writer, tenant, embedder, django_capture_on_commit_callbacks):
    kb = KnowledgeBaseFactory(tenant=tenant)
    with django_capture_on_commit_callbacks(execute=False):  # queued, never sent: no worker needed
        task_id = upload(writer, kb.pk, text_file("a.txt", "hello")).json()["task_id"]
    assert writer.get(f"/api/v1/tasks/{task_id}").json()["state"] == "PENDING"
    stranger = client_with(TenantFactory(), "search", "ingest").get(f"/api/v1/tasks/{task_id}")
    assert (stranger.status_code, stranger.json()["error"]["code"]) == (404, "task_not_found")
