"""Ingestion from stored originals, as the worker runs it: the files are kept first (``keep_original``),
then a task gets JSON, the KB id and per file ``{"source_uri", "original", "labels"}`` (``task_file``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from django.core.files.base import ContentFile
from django.db import transaction

from knowledge.ingestion.files import (
    SourceFile,
    keep_original,
    read_sidecar,
    record_failure,
    stored_sources,
    task_file,
)
from knowledge.ingestion.pipeline import Ingester, IngestReport
from knowledge.models import Document, KnowledgeBase, KnowledgeBaseVersion, KnowledgeTask
from knowledge.parsing import ParseError
from knowledge.queue import queue_task

INGEST_TASK = "knowledge.tasks.ingest_documents"


def queue_ingestion(kb: KnowledgeBase, files: list[dict[str, Any]]) -> KnowledgeTask:
    return queue_task(kb, KnowledgeTask.Kind.INGEST, INGEST_TASK, (kb.pk, files))


def queue_files(kb: KnowledgeBase, sources: Sequence[SourceFile]) -> KnowledgeTask:
    """Keep local files (``manage.py ingest --async``) and queue their ingestion with their sidecar
    labels; a file that cannot be read, or whose sidecar is invalid, is recorded failed at once."""
    with transaction.atomic():
        files, _ = store_local_files(kb, sources)
        return queue_ingestion(kb, files)


def store_local_files(
    kb: KnowledgeBase, sources: Sequence[SourceFile], default_acl: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Keep local files in the originals storage, as task files with their sidecar labels (``default_acl``:
    their source's ACL, under a folder ACL file's); a file that cannot be read, or whose sidecar is
    invalid, is recorded failed. Returns (task files, failures)."""
    files, failures = [], []
    for source in sources:
        try:
            data = source.path.read_bytes()
            labels = read_sidecar(source.path, source.source_uri, default_acl)
        except (OSError, ParseError) as exc:
            existing = Document.objects.filter(knowledge_base=kb, source_uri=source.source_uri).first()
            failures.append((source.source_uri, record_failure(kb, source.source_uri, existing, str(exc)).error))
            continue
        original = keep_original(kb, source.path.name, hashlib.md5(data).hexdigest(), ContentFile(data))
        files.append(task_file(source.source_uri, original, labels))
    return files, failures


def ingest_stored_files(
    kb: KnowledgeBase, files: list[dict[str, Any]], *, on_progress: Callable[[int], None]
) -> IngestReport:
    """What an ingestion task runs: the stored originals through the Ingester into the active version,
    then into any version being built (so it does not miss them). An embedder failure raises so the
    task retries (documents written before it are then unchanged by MD5)."""
    with stored_sources(files) as sources:
        report = Ingester(kb, on_progress=on_progress, raise_embedding_errors=True).ingest(sources)
        for version in kb.versions.filter(status=KnowledgeBaseVersion.Status.BUILDING):
            Ingester(kb, version=version, raise_embedding_errors=True).ingest(sources)
    return report


def fail_pending_documents(kb_id: int, files: list[dict[str, Any]], reason: str) -> None:
    """After a task gave up: its documents still ``pending`` are failed, so none waits forever."""
    Document.objects.filter(
        knowledge_base_id=kb_id, source_uri__in=[item["source_uri"] for item in files], status=Document.Status.PENDING
    ).update(status=Document.Status.FAILED, error=reason)
