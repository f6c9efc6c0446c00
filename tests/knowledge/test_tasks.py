"""Ingestion tasks on a real Celery worker (in a thread of this process, or a process of its own),
the embedded Redis as broker and result backend, and the test database."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from celery.result import AsyncResult
from django.conf import settings

from engines.base import GraphScope
from knowledge import tasks
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.stored import queue_files
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk, Document, originals_storage
from knowledge.stores import graph_store
from retrieval_site.celery import app
from tests.concurrency import wait_until
from tests.conftest import database_url_of_this_run

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


def finished_spans_once(spans, name: str) -> tuple:
    """The finished spans once ``name`` is among them: a worker stores a task's result before it ends
    the task's span, so a client that saw the result may read the spans a moment too early."""
    wait_until(
        lambda: any(span.name == name for span in spans.get_finished_spans()),
        timeout=TASK_TIMEOUT_S,
        message=f"the span {name} to end",
    )
    return spans.get_finished_spans()


def test_a_task_is_traced_from_its_sender_through_each_ingestion_stage(celery_worker, kb, files, spans):
    wait(queue_files(kb, discover_files([files])).task_id)
    finished = finished_spans_once(spans, "run/knowledge.tasks.ingest_documents")
    by_name = {span.name: span for span in finished}
    sent, run = by_name["apply_async/knowledge.tasks.ingest_documents"], by_name["run/knowledge.tasks.ingest_documents"]
    assert run.parent.span_id == sent.context.span_id  # the trace context travelled in the message
    stages = [span for span in finished if span.name.startswith("ingest.")]
    expected = {"ingest.parse", "ingest.embed", "ingest.extract", "ingest.write", "ingest.index"}
    assert {span.name for span in stages} == expected
    assert all(span.parent.span_id == run.context.span_id for span in stages)
    assert len([span for span in stages if span.name == "ingest.parse"]) == 3  # one per file
    assert {span.context.trace_id for span in finished} == {sent.context.trace_id}


def test_an_ingestion_that_changed_documents_rebuilds_the_graph_communities_in_a_task(celery_worker, kb, files):
    (files / "lock-2.md").write_text("The PPR-9087 lock takes the PPR-9087-BAT battery pack made by Skyline Home.")
    result = wait(queue_files(kb, discover_files([files])).task_id)
    communities = wait(result["communities_task"])
    assert communities["version_id"] == kb.active_version_id
    stored = graph_store().communities(GraphScope(kb.tenant_id, (kb.active_version_id,)))
    assert communities["communities"] == len(stored) > 0
    again = wait(queue_files(kb, discover_files([files])).task_id)
    assert again["unchanged"] == 3 and again["communities_task"] is None  # nothing changed: nothing to redo


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


def start_worker_process(log_path: Path, **env: str) -> tuple[subprocess.Popen, str]:
    """``celery -A retrieval_site worker`` as operators run it, on the test database and this run's
    keyword indexes and originals; returns once it answers a ping."""
    name = f"test-{uuid.uuid4().hex[:8]}@localhost"
    environment = {
        **os.environ,
        "DATABASE_URL": database_url_of_this_run(),
        "LEXICAL_INDEX_DIR": str(settings.LEXICAL_INDEX_DIR),
        "ORIGINALS_DIR": settings.STORAGES["originals"]["OPTIONS"]["location"],
        "LOG_LEVEL": "WARNING",
        **env,
    }
    command = [sys.executable, "-m", "celery", "-A", "retrieval_site", "worker", "--pool", "solo", "-n", name]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)

    def answers_ping() -> bool:  # each ping waits up to 0.5 s for the answer
        if process.poll() is not None:
            raise AssertionError(f"the worker exited:\n{log_path.read_text()}")
        return bool(app.control.ping(destination=[name], timeout=0.5))

    try:
        wait_until(answers_ping, timeout=60, message=f"the worker to start (log: {log_path})")
    except AssertionError:
        process.kill()
        raise
    return process, name


def stop(process: subprocess.Popen) -> None:
    process.terminate()  # warm shutdown: finishes the current task, then exits
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def worker_process(celery_app, transactional_db, tmp_path):
    process, _ = start_worker_process(tmp_path / "worker.log")
    yield process
    stop(process)


def test_a_worker_process_ingests_into_the_test_database(worker_process, kb, files):
    result = wait(queue_files(kb, discover_files([files])).task_id)
    assert (result["added"], result["failed"]) == (2, 1)
    assert Document.objects.filter(knowledge_base=kb, status=Document.Status.READY).count() == 2
    assert worker_process.poll() is None


def test_a_worker_killed_mid_task_leaves_every_document_exactly_once(celery_app, kb, tmp_path):
    """kill -9 while the task runs; the next worker gets it again (``acks_late``) and finishes it."""
    from engines import get_lexical_index

    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(60):
        sentences = " ".join(f"Part {n}-{m} of the manual explains step {m} of procedure {n}." for m in range(12))
        (folder / f"doc-{n:02d}.txt").write_text(sentences)
    visibility = {"CELERY_VISIBILITY_TIMEOUT_S": "2"}
    first, _ = start_worker_process(tmp_path / "worker.log", **visibility)
    try:
        task = queue_files(kb, discover_files([folder]))

        def some_documents_in() -> bool:  # killed mid-task: some documents written, not all
            result = AsyncResult(task.task_id)
            return result.state == "PROGRESS" and result.info["done"] > 0

        wait_until(some_documents_in, timeout=TASK_TIMEOUT_S, interval=0.05, message="the worker to ingest a document")
        first.kill()
        first.wait()
    finally:
        stop(first)
    assert AsyncResult(task.task_id).state not in ("SUCCESS", "FAILURE"), "finished before the kill: no crash tested"
    # The broker hands the task to the next worker once it has been unacknowledged past the visibility
    # timeout: at the worker's start or at its next look (every 10 s); wait() waits for either.
    second, _ = start_worker_process(tmp_path / "worker.log", **visibility)
    try:
        result = wait(task.task_id)
    finally:
        stop(second)

    assert result["failed"] == 0 and result["added"] + result["replaced"] + result["unchanged"] == 60
    version = kb.active_version
    documents = Document.objects.filter(knowledge_base=kb)
    assert documents.count() == 60 and not documents.exclude(status=Document.Status.READY).exists()
    for document in documents:
        ordinals = sorted(document.chunks.filter(kb_version=version).values_list("ordinal", flat=True))
        assert ordinals == list(range(document.chunk_count)), document.source_uri  # one chunk set, complete
    chunks = Chunk.objects.filter(kb_version=version).count()
    assert get_lexical_index().state(version.pk).num_docs == chunks  # the keyword index equals the rows


def test_the_purge_task_runs_on_the_worker(celery_worker, kb):
    assert tasks.purge_versions.delay().get(timeout=TASK_TIMEOUT_S) == 0  # nothing old enough yet
