"""The knowledge REST API over real HTTP handling, the real database and, for uploads, a real worker."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from knowledge import queue
from knowledge.models import Document, KnowledgeBase, KnowledgeBaseVersion, KnowledgeTask, originals_storage
from knowledge.versions import VERSION_SETTINGS
from tests.concurrency import race, wait_until
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory, TenantFactory, give_unlimited_rate_tier

pytestmark = [pytest.mark.slow]


@pytest.fixture
def writer(tenant) -> APIClient:
    """A key that may read and write, on a tier that lets tests poll tasks as fast as they like."""
    give_unlimited_rate_tier(tenant)
    return client_for(tenant, "ingest", "search")


def upload(client, kb_id, *files, **fields):
    url = f"/api/v1/knowledge-bases/{kb_id}/documents"
    return client.post(url, {"files": list(files), **fields}, format="multipart")


def text_file(name: str, text: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/plain")


def poll(client, status_url: str, timeout_s: float = 120) -> list[dict]:
    """Every distinct answer of the task's status until it ends."""
    answers: list[dict] = []

    def ended() -> bool:
        response = client.get(status_url)
        assert response.status_code == 200, response.content
        body = response.json()
        if not answers or answers[-1] != body:
            answers.append(body)
        return body["state"] in ("SUCCESS", "FAILURE")

    wait_until(ended, timeout=timeout_s, interval=0.1, message=f"the task at {status_url} to end")
    return answers


# --- knowledge bases ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_list_and_read_knowledge_bases(writer, tenant, embedder):
    response = writer.post("/api/v1/knowledge-bases", {"name": "handbook", "chunk_size": 120}, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["name"], created["chunk_size"], created["active_version"]) == ("handbook", 120, 1)
    assert (created["embedding_model"], created["embedding_dim"]) == (embedder.model_name, embedder.dimension)
    assert created["chunk_overlap"] <= 60 and created["document_count"] == 0

    reader = client_for(tenant, "search")
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
    body = {"name": "b", "embedding_model": "/no/such/model"}
    unknown_model = writer.post("/api/v1/knowledge-bases", body, format="json")
    assert (unknown_model.status_code, unknown_model.json()["error"]["code"]) == (400, "invalid_embedding_model")
    invalid = writer.post("/api/v1/knowledge-bases", {"name": "", "chunk_size": 0}, format="json")
    assert (invalid.status_code, invalid.json()["error"]["code"]) == (400, "invalid_request")
    assert set(invalid.json()["error"]["details"]) == {"name", "chunk_size"}


@pytest.mark.django_db
def test_chunking_is_chosen_per_knowledge_base_and_version_and_checked(
    writer, tenant, embedder, django_capture_on_commit_callbacks
):
    created = writer.post("/api/v1/knowledge-bases", {"name": "pc", "chunking": "parent_child"}, format="json")
    assert created.status_code == 201, created.content
    assert (created.json()["chunking"], created.json()["chunk_size"], created.json()["parent_chunk_size"]) == (
        "parent_child", 128, 512,
    )  # fmt: skip
    plain = writer.post("/api/v1/knowledge-bases", {"name": "plain"}, format="json").json()
    assert (plain["chunking"], plain["parent_chunk_size"]) == ("plain", None)

    def refused(url: str, body: dict) -> tuple[int, str, str]:
        error = writer.post(url, body, format="json")
        return error.status_code, error.json()["error"]["code"], error.json()["error"]["message"]

    kbs = "/api/v1/knowledge-bases"
    status, code, _ = refused(kbs, {"name": "x", "chunking": "sentences"})
    assert (status, code) == (400, "invalid_request")
    status, code, message = refused(
        kbs, {"name": "x", "chunking": "parent_child", "chunk_size": 200, "parent_chunk_size": 100}
    )
    assert (status, code) == (400, "invalid_chunking") and "must not exceed parent_chunk_size (100)" in message
    status, code, message = refused(kbs, {"name": "x", "parent_chunk_size": 300})
    assert (status, code) == (400, "invalid_chunking") and "parent_child only" in message
    assert writer.get(kbs).json()["count"] == 2  # none of the refused was created

    versions = f"{kbs}/{created.json()['id']}/versions"
    with django_capture_on_commit_callbacks(execute=False):  # the builds are recorded, never sent
        status, code, _ = refused(versions, {"parent_chunk_size": 16})  # the active children are 128 tokens
        assert (status, code) == (400, "invalid_chunking")
        switched = writer.post(versions, {"chunking": "plain"}, format="json")
    assert switched.status_code == 202, switched.content
    version = switched.json()["version"]
    assert (version["chunking"], version["chunk_size"], version["parent_chunk_size"]) == ("plain", 200, None)


@pytest.mark.django_db
def test_writes_need_the_ingest_scope_and_reads_search_or_ingest(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    search_only, ingest_only = client_for(tenant, "search"), client_for(tenant, "ingest")
    refused = search_only.post("/api/v1/knowledge-bases", {"name": "x"}, format="json")
    assert (refused.status_code, refused.json()["error"]["details"]) == (403, {"required_scope": "ingest"})
    assert upload(search_only, kb.pk, text_file("a.txt", "hello")).status_code == 403
    assert ingest_only.get(f"/api/v1/knowledge-bases/{kb.pk}/documents").status_code == 200
    admin_only = client_for(tenant, "admin").get(f"/api/v1/knowledge-bases/{kb.pk}")
    assert (admin_only.status_code, admin_only.json()["error"]["code"]) == (403, "insufficient_scope")


@pytest.mark.django_db
def test_knowledge_requests_are_rate_limited_per_tier(tenant):
    tier = tenant.rate_tier
    tier.endpoint_limits = {**tier.endpoint_limits, "knowledge": 2}
    tier.save()
    reader = client_for(tenant, "search")
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
        SimpleUploadedFile("photo.gif", b"GIF89a", content_type="image/gif"),
        metadata=json.dumps(labels),
    )
    assert response.status_code == 202, response.content
    queued = response.json()
    statuses = {doc["name"]: doc["status"] for doc in queued["documents"]}
    assert statuses == {"lock.md": "pending", "kettle.txt": "pending", "broken.pdf": "pending", "photo.gif": "failed"}
    assert queued["status_url"] == f"/api/v1/tasks/{queued['task_id']}"

    answers = poll(writer, queued["status_url"])
    final = answers[-1]
    assert final["state"] == "SUCCESS", final
    assert final["progress"] == {"done": 3, "total": 3, "unit": "documents"}
    assert (final["result"]["added"], final["result"]["failed"]) == (2, 1)
    for answer in answers[:-1]:  # every earlier answer is a state on the way, never an error
        assert answer["state"] in ("PENDING", "STARTED", "PROGRESS") and answer["error"] is None

    listed = writer.get(f"/api/v1/knowledge-bases/{kb['id']}/documents").json()["results"]
    documents = {doc["name"]: doc for doc in listed}
    assert {name: doc["status"] for name, doc in documents.items()} == {
        "lock.md": "ready", "kettle.txt": "ready", "broken.pdf": "failed", "photo.gif": "failed",
    }  # fmt: skip
    assert "unsupported" in documents["photo.gif"]["error"] and documents["broken.pdf"]["error"]
    assert (documents["lock.md"]["tags"], documents["lock.md"]["metadata"]) == (["manual"], {"shop_id": 7})
    assert documents["lock.md"]["parse_report"] == {
        "pages": 0, "slides": 0, "sheets": 0, "rows": 0, "tables": 0, "ocr_pages": 0, "ocr_engine": "", "warnings": [],
    }  # fmt: skip
    lock = documents["lock.md"]
    assert writer.get(f"/api/v1/knowledge-bases/{kb['id']}/documents/{lock['id']}").json() == lock

    def bm25_hits() -> list[int]:
        body = {"query": "PPR-9087 lock", "kb_ids": [kb["id"]], "filters": {"metadata.shop_id": 7}}
        response = writer.post("/api/v1/retrieval/bm25", body, format="json")
        assert response.status_code == 200, response.content
        return [hit["doc_id"] for hit in response.json()["results"]]

    assert lock["id"] in bm25_hits()
    original = Document.objects.get(pk=lock["id"]).original
    assert writer.delete(f"/api/v1/knowledge-bases/{kb['id']}/documents/{lock['id']}").status_code == 204
    assert lock["id"] not in bm25_hits()  # at once; the row and its original go by a task

    def purged():  # "removed" until the task deletes the row
        answer = writer.get(f"/api/v1/knowledge-bases/{kb['id']}/documents/{lock['id']}")
        assert answer.status_code == 404 or answer.json()["status"] == "removed", answer.json()
        return answer if answer.status_code == 404 else None

    gone = wait_until(purged, timeout=60, interval=0.1, message="the removed document to be purged")
    assert gone.json()["error"]["code"] == "document_not_found"
    assert not originals_storage().exists(original)


@pytest.mark.django_db
def test_a_task_is_visible_to_its_tenant_only(writer, tenant, embedder, django_capture_on_commit_callbacks):
    kb = KnowledgeBaseFactory(tenant=tenant)
    with django_capture_on_commit_callbacks(execute=False):  # queued, never sent: no worker needed
        task_id = upload(writer, kb.pk, text_file("a.txt", "hello")).json()["task_id"]
    assert writer.get(f"/api/v1/tasks/{task_id}").json()["state"] == "PENDING"
    stranger = client_for(TenantFactory(), "search", "ingest").get(f"/api/v1/tasks/{task_id}")
    assert (stranger.status_code, stranger.json()["error"]["code"]) == (404, "task_not_found")


# --- versions ----------------------------------------------------------------------------------------


def search_chunk_ids(client, kb_id: int, query: str) -> tuple[set[int], bool]:
    response = client.post("/api/v1/retrieval/bm25", {"query": query, "kb_ids": [kb_id]}, format="json")
    assert response.status_code == 200, response.content
    return {hit["chunk_id"] for hit in response.json()["results"]}, response.json()["cached"]


@pytest.fixture
def uploaded_kb(celery_worker, writer) -> dict:
    """A KB with two documents ingested through the API and the worker."""
    kb = writer.post("/api/v1/knowledge-bases", {"name": "manuals", "chunk_size": 200}, format="json").json()
    text = " ".join(f"Step {n}: tighten the PPR-9087 lock screw number {n} by a quarter turn." for n in range(40))
    queued = upload(writer, kb["id"], text_file("lock.txt", text), text_file("kettle.txt", "The kettle boils water."))
    assert poll(writer, queued.json()["status_url"])[-1]["state"] == "SUCCESS"
    return kb


@pytest.mark.django_db(transaction=True)
def test_a_new_version_builds_beside_the_active_one_then_switches_and_rolls_back(uploaded_kb, writer):
    from knowledge.models import Chunk

    kb_id = uploaded_kb["id"]
    versions_url = f"/api/v1/knowledge-bases/{kb_id}/versions"
    v1_chunks = set(Chunk.objects.filter(knowledge_base_id=kb_id, kb_version__number=1).values_list("id", flat=True))
    before, _ = search_chunk_ids(writer, kb_id, "PPR-9087 lock screw")
    assert before and before <= v1_chunks

    response = writer.post(versions_url, {"chunk_size": 48, "activate": "manual"}, format="json")
    assert response.status_code == 202, response.content
    assert (response.json()["version"]["number"], response.json()["version"]["chunk_size"]) == (2, 48)
    assert poll(writer, response.json()["status_url"])[-1]["result"]["status"] == "ready"
    versions = {v["number"]: v for v in writer.get(versions_url).json()["results"]}
    assert (versions[1]["status"], versions[2]["status"]) == ("active", "ready")
    assert versions[2]["document_count"] == 2 and versions[2]["chunk_count"] > versions[1]["chunk_count"]
    assert search_chunk_ids(writer, kb_id, "PPR-9087 lock screw") == (before, True)  # still version 1, cached

    switched = writer.post(f"{versions_url}/2/activate")
    assert (switched.status_code, switched.json()["status"]) == (200, "active")
    counts = ("document_count", "chunk_count")
    assert [switched.json()[name] for name in counts] == [versions[2][name] for name in counts]
    kb = writer.get(f"/api/v1/knowledge-bases/{kb_id}").json()
    assert (kb["active_version"], kb["chunk_size"]) == (2, 48)
    after, cached = search_chunk_ids(writer, kb_id, "PPR-9087 lock screw")
    assert after and not (after & v1_chunks) and cached is False

    rolled_back = writer.post(f"{versions_url}/1/activate")
    assert (rolled_back.status_code, rolled_back.json()["status"]) == (200, "active")
    assert [rolled_back.json()[name] for name in counts] == [2, len(v1_chunks)]
    assert writer.get(versions_url).json()["results"][0]["status"] == "retired"
    again, cached = search_chunk_ids(writer, kb_id, "PPR-9087 lock screw")
    assert again == before and cached is False  # version 1's chunks, kept; no answer cached before the switches
    kept = Chunk.objects.filter(knowledge_base_id=kb_id, kb_version__number=1).values_list("id", flat=True)
    assert set(kept) == v1_chunks


@pytest.mark.django_db(transaction=True)
def test_an_auto_version_activates_itself_and_a_failed_one_never_does(uploaded_kb, writer):
    kb_id = uploaded_kb["id"]
    versions_url = f"/api/v1/knowledge-bases/{kb_id}/versions"
    response = writer.post(versions_url, {"chunk_size": 64, "activate": "auto"}, format="json")
    assert poll(writer, response.json()["status_url"])[-1]["result"]["status"] == "active"
    assert writer.get(f"/api/v1/knowledge-bases/{kb_id}").json()["active_version"] == 2

    Document.objects.filter(knowledge_base_id=kb_id, source_uri="kettle.txt").update(original="")  # lost original
    response = writer.post(versions_url, {"activate": "auto"}, format="json")
    assert poll(writer, response.json()["status_url"])[-1]["result"]["status"] == "failed"
    failed = writer.get(versions_url).json()["results"][0]
    assert failed["number"] == 3 and "kettle.txt" in failed["error"]
    refused = writer.post(f"{versions_url}/3/activate")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "version_conflict")
    assert writer.get(f"/api/v1/knowledge-bases/{kb_id}").json()["active_version"] == 2


@pytest.mark.django_db
def test_version_requests_are_checked(writer, tenant, django_capture_on_commit_callbacks):
    kb = KnowledgeBaseFactory(tenant=tenant)
    versions_url = f"/api/v1/knowledge-bases/{kb.pk}/versions"
    with django_capture_on_commit_callbacks(execute=False):  # the build is recorded, never sent
        assert writer.post(versions_url, {}, format="json").status_code == 202
    busy = writer.post(versions_url, {}, format="json")
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "version_conflict")
    building = writer.post(f"{versions_url}/2/activate")
    assert (building.status_code, building.json()["error"]["code"]) == (409, "version_conflict")
    unknown = writer.post(f"{versions_url}/9/activate")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "version_not_found")
    bad = writer.post(versions_url, {"activate": "sometimes"}, format="json")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_request")
    reader = client_for(tenant, "search")
    assert reader.get(versions_url).status_code == 200
    assert reader.post(f"{versions_url}/1/activate").status_code == 403
    assert reader.post(f"{versions_url}/1/retire").status_code == 403


@pytest.mark.django_db
def test_a_ready_version_is_retired_and_the_active_one_is_refused(writer, tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    settings_of = {name: getattr(kb.active_version, name) for name in VERSION_SETTINGS}
    KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=2, status="ready", **settings_of)
    versions_url = f"/api/v1/knowledge-bases/{kb.pk}/versions"
    retired = writer.post(f"{versions_url}/2/retire")
    assert (retired.status_code, retired.json()["number"], retired.json()["status"]) == (200, 2, "retired")
    active = writer.post(f"{versions_url}/1/retire")
    assert (active.status_code, active.json()["error"]["code"]) == (409, "version_conflict")
    assert "activate another version instead" in active.json()["error"]["message"]
    other = KnowledgeBaseFactory()
    assert writer.post(f"/api/v1/knowledge-bases/{other.pk}/versions/1/retire").status_code == 404


# --- Idempotency-Key on the knowledge POSTs (core.idempotency) ---------------------------------------


@pytest.mark.django_db
def test_a_knowledge_base_created_with_a_key_is_created_once(writer, tenant, embedder):
    key = {"HTTP_IDEMPOTENCY_KEY": "create-handbook-1"}
    first = writer.post("/api/v1/knowledge-bases", {"name": "handbook"}, format="json", **key)
    again = writer.post("/api/v1/knowledge-bases", {"name": "handbook"}, format="json", **key)
    assert (first.status_code, again.status_code) == (201, 201), again.content
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert KnowledgeBase.objects.filter(tenant=tenant, name="handbook").count() == 1
    other = writer.post("/api/v1/knowledge-bases", {"name": "manuals"}, format="json", **key)
    assert (other.status_code, other.json()["error"]["code"]) == (422, "idempotency_key_reused")
    unkeyed = writer.post("/api/v1/knowledge-bases", {"name": "handbook"}, format="json")
    assert unkeyed.json()["error"]["code"] == "knowledge_base_exists"  # no key: it runs again


@pytest.mark.django_db
def test_an_upload_retried_with_its_key_queues_one_task(writer, tenant, django_capture_on_commit_callbacks):
    """A retry's multipart body has another boundary: the key's fingerprint is its fields and files."""
    from django.test.client import encode_multipart

    kb = KnowledgeBaseFactory(tenant=tenant)
    url = f"/api/v1/knowledge-bases/{kb.pk}/documents"

    def post(boundary: str, text: str, key: str = "upload-1"):
        body = encode_multipart(boundary, {"files": [text_file("a.txt", text)], "metadata": '{"tags": ["x"]}'})
        content_type = f"multipart/form-data; boundary={boundary}"
        return writer.generic("POST", url, body, content_type=content_type, HTTP_IDEMPOTENCY_KEY=key)

    with django_capture_on_commit_callbacks(execute=False):  # queued, never sent: no worker needed
        first, again = post("first-boundary", "hello"), post("second-boundary", "hello")
        changed = post("third-boundary", "hello, world")
    assert (first.status_code, again.status_code) == (202, 202), again.content
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert KnowledgeTask.objects.filter(knowledge_base=kb).count() == 1
    assert (changed.status_code, changed.json()["error"]["code"]) == (422, "idempotency_key_reused")


@pytest.mark.django_db
def test_a_too_large_upload_is_refused_before_its_key_is_read(writer, tenant, settings):
    settings.UPLOAD_MAX_REQUEST_BYTES = 100
    kb = KnowledgeBaseFactory(tenant=tenant)
    url = f"/api/v1/knowledge-bases/{kb.pk}/documents"
    response = writer.post(
        url, {"files": [text_file("a.txt", "x" * 500)]}, format="multipart", HTTP_IDEMPOTENCY_KEY="big"
    )
    assert (response.status_code, response.json()["error"]["code"]) == (413, "payload_too_large")


# --- uniqueness under concurrent requests (tests.concurrency.race: threads on the real database) -----


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_creates_of_one_kb_name_answer_201_and_409(tenant, embedder):
    clients = [client_for(tenant, "ingest") for _ in range(2)]
    body = {"name": "twin"}
    responses = race(*[lambda c=client: c.post("/api/v1/knowledge-bases", body, format="json") for client in clients])
    assert sorted(response.status_code for response in responses) == [201, 409], [r.content for r in responses]
    [conflict] = [response for response in responses if response.status_code == 409]
    assert conflict.json()["error"]["code"] == "knowledge_base_exists"
    assert KnowledgeBase.objects.filter(tenant=tenant, name="twin").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_version_builds_answer_202_and_409_with_one_new_number(tenant, embedder, monkeypatch):
    """Version numbers are taken one at a time (the KB row is locked): the second request waits for the
    first, then finds its version building."""
    sent = []
    monkeypatch.setattr(queue, "enqueue", lambda name, args, **options: sent.append(name))  # no worker here
    kb = KnowledgeBaseFactory(tenant=tenant)
    clients = [client_for(tenant, "ingest") for _ in range(2)]
    url = f"/api/v1/knowledge-bases/{kb.pk}/versions"
    responses = race(*[lambda client=client: client.post(url, {}, format="json") for client in clients])
    assert sorted(response.status_code for response in responses) == [202, 409], [r.content for r in responses]
    [conflict] = [response for response in responses if response.status_code == 409]
    assert conflict.json()["error"]["code"] == "version_conflict"
    assert sorted(kb.versions.values_list("number", flat=True)) == [1, 2] and len(sent) == 1
