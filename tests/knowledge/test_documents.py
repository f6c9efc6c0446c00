"""Writes for documents (knowledge.documents): relabel, delete, re-ingest, upload."""

import pytest

from knowledge.documents import delete_document, queue_uploads, reingest_documents, update_document_labels
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.ingestion.stored import fail_pending_documents, ingest_stored_files
from knowledge.models import Document, KnowledgeBaseVersion
from tests.concurrency import race
from tests.factories import ChunkFactory, DocumentFactory
from tests.knowledge.helpers import graph_names, ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_relabelling_keeps_what_is_not_given_and_each_chunks_own_metadata(db):
    document = DocumentFactory(title="Manual", tags=["a"], metadata={"lang": "en", "page": 9})
    for page in (1, 2):  # a key the chunk shares with its document is the document's
        ChunkFactory(document=document, tags=["a"], metadata={"page": 9, "lang": "en", "section": page})
    revision = document.knowledge_base.active_version.revision

    update_document_labels(document, metadata={"shop_id": 3})
    update_document_labels(document, tags=["b"])

    stored = Document.objects.get(pk=document.pk)
    assert (stored.title, stored.tags, stored.metadata) == ("Manual", ["b"], {"shop_id": 3})
    chunks = document.chunks.order_by("ordinal").values_list("tags", "metadata")
    assert list(chunks) == [(["b"], {"section": 1, "shop_id": 3}), (["b"], {"section": 2, "shop_id": 3})]
    assert KnowledgeBaseVersion.objects.get(pk=document.knowledge_base.active_version_id).revision == revision + 2


def test_deleting_a_document_removes_its_part_of_the_graph(kb, tmp_path):
    (tmp_path / "lock.txt").write_text("The PortaLock Pro lock PPR-9087 is made by Skyline Home.")
    (tmp_path / "sensor.txt").write_text("The AirSense monitor SKY-30452 is made by Skyline Home.")
    ingest(kb, tmp_path)
    delete_document(Document.objects.get(knowledge_base=kb, source_uri__endswith="/lock.txt"))
    names = graph_names(kb)
    assert "ppr-9087" not in names and names["skyline home"] == 1 and "sky-30452" in names


@pytest.fixture
def queued(monkeypatch):
    """The ingestion tasks the services queue, recorded (their arguments) instead of sent to a worker."""
    from knowledge import tasks

    sent = []
    monkeypatch.setattr(tasks.ingest_documents, "apply_async", lambda args, task_id: sent.append(args))
    return sent


def test_reingesting_rechunks_a_document_even_unchanged_and_skips_one_without_its_file(
    kb, tmp_path, queued, django_capture_on_commit_callbacks
):
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    document = Document.objects.get(knowledge_base=kb)
    update_document_labels(document, title="Lock manual")  # applies when the file is re-chunked
    assert Document.objects.get(pk=document.pk).context == ""
    unstored = DocumentFactory(knowledge_base=kb, source_uri="gone.txt", original="")
    with django_capture_on_commit_callbacks(execute=True):
        task, skipped = reingest_documents(kb, [document, unstored])
    assert task.kind == "ingest" and skipped == [unstored]
    ((kb_id, files),) = queued
    assert kb_id == kb.pk and [item["source_uri"] for item in files] == [document.source_uri]
    unforced = [{**item, "force": False} for item in files]
    assert ingest_stored_files(kb, unforced, on_progress=lambda done: None).unchanged == 1
    report = ingest_stored_files(kb, files, on_progress=lambda done: None)
    assert (report.unchanged, report.replaced) == (0, 1)
    document.refresh_from_db()
    assert (document.title, document.context, document.status) == ("Lock manual", "Lock manual", "ready")
    assert reingest_documents(kb, [unstored]) == (None, [unstored])
    with pytest.raises(ValueError, match="not in knowledge base"):
        reingest_documents(kb, [DocumentFactory()])


def test_an_uploaded_document_records_its_original_at_once_so_a_failed_one_can_be_reingested(
    kb, queued, django_capture_on_commit_callbacks
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("returns.txt", b"Returns are accepted within 30 days of delivery.")
    with django_capture_on_commit_callbacks(execute=True):
        _, (document,) = queue_uploads(kb, [upload], None)
    assert document.status == "pending" and document.original
    ((_, files),) = queued
    fail_pending_documents(kb.pk, files, "ingestion failed: the worker gave up")  # as a task giving up does
    with django_capture_on_commit_callbacks(execute=True):
        reingest_documents(kb, [Document.objects.get(pk=document.pk)])
    ((_, again),) = queued[1:]
    assert again[0]["labels"] is None  # never ingested: the file's own labels
    ingest_stored_files(kb, again, on_progress=lambda done: None)
    document.refresh_from_db()
    assert (document.status, document.error, document.chunk_count > 0) == ("ready", "", True)


@pytest.mark.django_db(transaction=True)
def test_two_uploads_of_one_file_name_at_once_share_one_document(kb, queued):
    """The second insert of the name waits for the first, fails on ``unique_source_per_kb`` and reads
    the first's row (``get_or_create``): both are queued, neither fails."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    texts = (b"Returns are accepted within 30 days.", b"Returns are accepted within 60 days.")
    uploads = [SimpleUploadedFile("returns.txt", text) for text in texts]
    outcomes = race(*[lambda upload=upload: queue_uploads(kb, [upload], None) for upload in uploads])
    assert all(isinstance(outcome, tuple) for outcome in outcomes), outcomes
    [document] = Document.objects.filter(knowledge_base=kb, source_uri="returns.txt")
    assert [documents[0].pk for _, documents in outcomes] == [document.pk] * 2 and len(queued) == 2
