"""Writes for documents: upload, re-ingest, relabel, take out of search, purge."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.base import File
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from knowledge.acls import set_document_acl
from knowledge.errors import UploadTooLarge
from knowledge.ingestion.files import Labels, keep_original, md5_of, record_failure, task_file
from knowledge.ingestion.stored import queue_ingestion
from knowledge.lexical import apply_pending_lexical_changes, record_lexical_change
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeTask, ParentChunk, originals_storage
from knowledge.parsing import ParseError, doc_type_for
from knowledge.queue import enqueue
from knowledge.revisions import bump_revisions
from knowledge.stores import graph_store, refresh_vector_fields, vector_index

PURGE_TASK = "knowledge.tasks.purge_documents"


def check_upload_size(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise UploadTooLarge(f"{what} is larger than the allowed maximum of {limit} bytes", details={"limit": limit})


def check_upload_sizes(uploads: Sequence[File[bytes]]) -> None:
    """The upload limits: ``UploadTooLarge`` (413) for a file above ``UPLOAD_MAX_FILE_BYTES``, or files
    together above ``UPLOAD_MAX_REQUEST_BYTES``."""
    for upload in uploads:
        check_upload_size(upload.size, settings.UPLOAD_MAX_FILE_BYTES, upload.name or "a file")
    check_upload_size(sum(upload.size for upload in uploads), settings.UPLOAD_MAX_REQUEST_BYTES, "the files together")


def queue_uploads(
    kb: KnowledgeBase, uploads: Sequence[File[bytes]], labels: Labels | None
) -> tuple[KnowledgeTask, list[Document]]:
    """Keep each uploaded file and queue one ingestion task for them. A new file's document is
    ``pending`` until the task ingests it; a replaced one stays as it is (searchable) until then; a
    file of an unsupported type is recorded ``failed`` at once."""
    documents, files = [], []
    with transaction.atomic():
        existing = {
            doc.source_uri: doc
            for doc in Document.objects.filter(knowledge_base=kb, source_uri__in=[upload.name for upload in uploads])
        }
        for upload in uploads:
            name = upload.name
            if name is None:  # a multipart upload always has one (Django skips a part without)
                raise ValueError("an uploaded file has no name")
            try:
                doc_type = doc_type_for(Path(name))
            except ParseError as exc:
                documents.append(record_failure(kb, name, existing.get(name), str(exc)))
                continue
            original = keep_original(kb, name, md5_of(upload), upload)
            document, _ = Document.objects.get_or_create(
                knowledge_base=kb,
                source_uri=name,
                defaults={
                    "tenant_id": kb.tenant_id,
                    "title": Path(name).stem,
                    "doc_type": doc_type,
                    "original": original,
                },  # fmt: skip
            )  # a new document is pending (the model's default) until the task ingests it; its original is
            # recorded at once, so it can be re-ingested even if this ingestion fails
            documents.append(document)
            files.append(task_file(name, original, labels))
        task = queue_ingestion(kb, files)
    return task, documents


def reingest_documents(kb: KnowledgeBase, documents: Iterable[Document]) -> tuple[KnowledgeTask | None, list[Document]]:
    """Queue one task that runs the KB's ``documents`` again from their stored originals, re-chunked and
    re-embedded even when unchanged (a failed one gets another try; an edited title reaches its chunks).
    A document ingested before keeps its labels; one never ingested takes its file's. Returns the task
    (None when nothing could be queued) and the documents skipped: those without a stored original."""
    files, skipped = [], []
    for doc in documents:
        if doc.knowledge_base_id != kb.pk:
            raise ValueError(f"document {doc.pk} is not in knowledge base {kb.pk}")
        if not doc.original:
            skipped.append(doc)
            continue
        labels = Labels(title=doc.title, tags=doc.tags, metadata=doc.metadata, acl=None) if doc.content_md5 else None
        files.append({**task_file(doc.source_uri, doc.original, labels), "force": True})
    if not files:
        return None, skipped
    with transaction.atomic():
        return queue_ingestion(kb, files), skipped


def delete_document(document: Document) -> None:
    """Take a document out of every search at once (see :func:`remove_from_search`); a task purges its
    row and stored original once the removal is committed."""
    remove_from_search(document.knowledge_base, [document.pk], purge=True)


def remove_from_search(kb: KnowledgeBase, document_ids: Sequence[int], *, purge: bool = False) -> int:
    """Deactivate documents of ``kb``: their chunks (rows, graph mentions) leave every version in one
    transaction and their keyword-index entries right after the commit; the documents stay ``removed``
    (no chunks) until purged. ``purge``: queue their purge once that commits (a failure to send, say
    the broker down, leaves them to the hourly purge). Returns how many were removed (already removed
    ones are skipped)."""
    with transaction.atomic():
        documents = Document.objects.select_for_update().filter(knowledge_base=kb, pk__in=list(document_ids))
        ids = list(documents.exclude(status=Document.Status.REMOVED).values_list("pk", flat=True))
        held: dict[int, list[int]] = {}
        for version_id, document_id in (
            Chunk.objects.filter(document_id__in=ids).order_by().values_list("kb_version_id", "document_id").distinct()
        ):
            held.setdefault(version_id, []).append(document_id)
        for version_id, holding in held.items():
            record_lexical_change(version_id, holding)
            chunk_ids = list(
                Chunk.objects.filter(kb_version_id=version_id, document_id__in=holding).values_list("id", flat=True)
            )
            graph_store().delete(kb.tenant_id, version_id, chunk_ids)
            vector_index().delete(version_id, chunk_ids)
        Chunk.objects.filter(document_id__in=ids).delete()
        ParentChunk.objects.filter(document_id__in=ids).delete()  # parent_child versions' passages
        Document.objects.filter(pk__in=ids).update(
            status=Document.Status.REMOVED,
            removed_at=timezone.now(),
            chunk_count=0,
            error="",
            updated_at=timezone.now(),
        )
        bump_revisions(list(held))
        if purge and ids:
            enqueue(PURGE_TASK, (ids,), robust=True)
    for version_id in held:
        apply_pending_lexical_changes(version_id)
    return len(ids)


def purge_document_rows(document_ids: Sequence[int]) -> int:
    """Delete documents that are still ``removed`` (one that came back meanwhile stays), and their stored
    originals unless another document uses the same one. Returns how many rows went."""
    with transaction.atomic():
        documents = Document.objects.select_for_update(skip_locked=True).filter(
            pk__in=list(document_ids), status=Document.Status.REMOVED
        )
        purged = list(documents.values_list("pk", "original"))
        Document.objects.filter(pk__in=[pk for pk, _ in purged]).delete()
        originals = {original for _, original in purged if original}
        kept = set(Document.objects.filter(original__in=originals).values_list("original", flat=True))
        storage = originals_storage()
        for name in originals - kept:
            transaction.on_commit(functools.partial(storage.delete, name), robust=True)
    return len(purged)


def purge_documents_removed_before(grace_hours: int) -> int:
    """Purge documents removed more than ``grace_hours`` ago (beat runs it hourly): those gone from their
    source, and deleted ones whose own purge task was never sent."""
    cutoff = timezone.now() - timedelta(hours=grace_hours)
    old = Document.objects.filter(status=Document.Status.REMOVED, removed_at__lt=cutoff)
    return purge_document_rows(list(old.values_list("pk", flat=True)))


def update_document_labels(
    document: Document,
    *,
    title: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    acl: list[str] | None = None,
) -> None:
    """Set a document's title, tags, metadata or ACL (None keeps one) and copy them onto every chunk of it,
    since filters read each chunk's copy, and onto its keyword-index entries (which carry the business
    fields BM25 filters on) once that commits; cached answers expire with the revision.

    A chunk's metadata is its own keys (such as a PDF's ``page``) under the document's, as ingestion
    writes it: the document's previous keys are replaced by the new ones, the chunk's own are kept (a
    key both had was the document's, so it goes with the document's previous keys)."""
    with transaction.atomic():
        stored = Document.objects.select_for_update().get(pk=document.pk)
        previous_keys = list(stored.metadata)
        stored.title = stored.title if title is None else title
        stored.tags = stored.tags if tags is None else tags
        stored.metadata = stored.metadata if metadata is None else metadata
        with connection.cursor() as cursor:
            relabel = [stored.tags, previous_keys, Jsonb(stored.metadata), stored.pk]
            cursor.execute(_RELABEL_CHUNKS_SQL, relabel)  # type: ignore[arg-type]  # the stubs lack psycopg's Jsonb
        stored.save(update_fields=["title", "tags", "metadata", "updated_at"])
        refresh_vector_fields(Chunk.objects.filter(document_id=stored.pk))  # Milvus keeps them beside the vectors
        versions = _versions_holding(stored)
        for version_id in versions:
            record_lexical_change(version_id, [stored.pk])
            # After the outermost commit (the admin saves inside its own transaction); a failure there
            # leaves the change pending for the next writer or ``check_kb --repair``.
            transaction.on_commit(functools.partial(apply_pending_lexical_changes, version_id), robust=True)
        bump_revisions(versions)
        if acl is not None and acl != stored.acl:  # who may read it: applied like the labels, in this transaction
            set_document_acl(document, acl)
    document.title, document.tags, document.metadata = stored.title, stored.tags, stored.metadata


# `jsonb - text[]` drops the document's previous keys, `||` puts the new ones over the chunk's own.
_RELABEL_CHUNKS_SQL = (
    f"UPDATE {Chunk._meta.db_table} SET tags = %s, metadata = (metadata - %s::text[]) || %s::jsonb "
    "WHERE document_id = %s"
)


def _versions_holding(document: Document) -> list[int]:
    """Ids of the KB versions that hold chunks of ``document``."""
    return list(document.chunks.order_by().values_list("kb_version_id", flat=True).distinct())
