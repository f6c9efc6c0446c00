"""Ingestion tasks on a real Celery worker (in a thread of this process, or a process of its own),
the embedded Redis as broker and result backend, and the test database."""
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from celery.result import AsyncResult
from django.conf import settings
from django.db import connection

from knowledge import tasks
from knowledge.models import Chunk, Document, originals_storage
from knowledge.services import create_knowledge_base, discover_files, queue_files

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
TASK_TIMEOUT_S = 120


@pytest.fixture
def files(tmp_path):
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "lock.md").write_text("# PPR-9087 lock\n\nThe PPR-9087 lock fits doors 35 to 80 mm thick.")
    (folder / "returns.txt").write_text("Returns are accepted within 30 days of delivery with the receipt.")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    return folder


@pytest.fixture
def kb(tenant, embedder):
    return create_knowledge_base(tenant=tenant, name="manuals")


def wait(task_id: str) -> dict:
    return AsyncResult(task_id).get(timeout=TASK_TIMEOUT_S)


def test_a_task_ingests_files_marks_the_bad_one_failed_and_reports_progress(celery_worker, kb, files, monkeypatch):
    seen = []  # (state, meta) as a reader of the result backend sees them after each report
    report = tasks.Progress._report

    def report_and_read(self):
        report(self)
        result = AsyncResult(self.task.request.id)
        seen.append((result.state, result.info))

    monkeypatch.setattr(tasks.Progress, "_report", report_and_read)
    task = queue_files(kb, discover_files([files]))
    result = wait(task.task_id)

    assert (result["added"], result["failed"]) == (2, 1)
    assert [failure["name"] for failure in result["failures"]] == ["manuals/broken.pdf"]
    assert seen == [("PROGRESS", {"done": done, "total": 3, "unit": "documents"}) for done in range(4)]
    documents = {doc.source_uri: doc for doc in Document.objects.filter(knowledge_base=kb)}
    assert documents["manuals/broken.pdf"].status == Document.Status.FAILED
    assert documents["manuals/broken.pdf"].error
    for name in ("manuals/lock.md", "manuals/returns.txt"):
        document = documents[name]
        assert document.status == Document.Status.READY
        assert document.chunks.count() == document.chunk_count > 0
        with originals_storage().open(document.original) as original:  # kept for rebuilds
            assert original.read() == (files / Path(name).name).read_bytes()


def test_queueing_the_same_files_again_changes_nothing(celery_worker, kb, files):
    wait(queue_files(kb, discover_files([files])).task_id)
    chunk_ids = set(Chunk.objects.filter(knowledge_base=kb).values_list("id", flat=True))
    result = wait(queue_files(kb, discover_files([files])).task_id)
    assert (result["added"], result["replaced"], result["unchanged"]) == (0, 0, 2)
    assert set(Chunk.objects.filter(knowledge_base=kb).values_list("id", flat=True)) == chunk_ids


def test_a_transient_embedder_outage_is_retried(celery_worker, tenant, files, remote_model, embedding_server):
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    embedding_server.outage = 2  # the first attempt and its first retry fail
    task = queue_files(kb, discover_files([files]))
    result = wait(task.task_id)
    assert result["added"] == 2
    assert Document.objects.filter(knowledge_base=kb, status=Document.Status.READY).count() == 2


def test_a_task_that_gives_up_leaves_no_document_pending(
    celery_worker, tenant, files, remote_model, embedding_server, monkeypatch
):
    kb = create_knowledge_base(tenant=tenant, name="remote", embedding_model="remote:minilm")
    embedding_server.mode = "500"
    monkeypatch.setattr(tasks.ingest_documents, "max_retries", 1)
    Document.objects.create(knowledge_base=kb, tenant=tenant, source_uri="manuals/lock.md", title="lock", doc_type="md")
    task = queue_files(kb, discover_files([files]))
    with pytest.raises(Exception, match="embedding endpoint"):
        wait(task.task_id)
    document = Document.objects.get(knowledge_base=kb, source_uri="manuals/lock.md")
    assert document.status == Document.Status.FAILED
    assert "ingestion failed" in document.error


def test_an_unknown_knowledge_base_fails_at_once_without_retrying(celery_worker):
    result = tasks.ingest_documents.apply_async((10**9, []))
    with pytest.raises(Exception, match="does not exist"):
        result.get(timeout=TASK_TIMEOUT_S)
    assert result.state == "FAILURE"


# --- a worker in a process of its own --------------------------------------------------------------


def test_database_url() -> str:
    """The service's database URL naming the test database instead."""
    parts = urlsplit(settings.DATABASE_URL)
    return urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}"))


@pytest.fixture
def worker_process(celery_app, transactional_db, lexical_index_dir, originals_dir, tmp_path):
    """``celery -A retrieval_site worker`` as operators run it, on the test database; stopped after."""
    name = f"test-{uuid.uuid4().hex[:8]}@localhost"
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "LEXICAL_INDEX_DIR": str(lexical_index_dir),
        "ORIGINALS_DIR": str(originals_dir),
        "LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-m", "celery", "-A", "retrieval_site", "worker", "--pool", "solo", "-n", name]
    with open(tmp_path / "worker.log", "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not celery_app.control.ping(destination=[name], timeout=0.5):
            assert process.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "the worker did not answer a ping within 60 s"
        yield process
    finally:
        process.terminate()  # warm shutdown: finishes the current task, then exits
        process.wait(timeout=60)


def test_a_worker_process_ingests_into_the_test_database(worker_process, kb, files):
    result = wait(queue_files(kb, discover_files([files])).task_id)
    assert (result["added"], result["failed"]) == (2, 1)
    assert Document.objects.filter(knowledge_base=kb, status=Document.Status.READY).count() == 2
    assert worker_process.poll() is None
