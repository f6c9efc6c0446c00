"""The keyword index of a version kept equal to its chunk rows: the commit protocol, rebuilds, checks.

A change to chunks records the documents it touched (``PendingLexicalChange``, an outbox) in its own
transaction; after the COMMIT their index entries are rewritten from the committed rows
(``LexicalIndex.write``) and the record is deleted.
A rollback or a kill before the COMMIT leaves the index untouched; a kill after it leaves the record,
which the next write to the version (or ``check_kb --repair``) applies. Searches drop index entries
whose chunk is gone, so the short lag after a kill never returns a missing chunk.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F

from core.faults import pause_at
from engines.analysis import Analyzer
from engines.base import LexicalDocument
from engines.lexical_filter import filter_fields
from knowledge.chunking import contextual_text
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseVersion, PendingLexicalChange
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import lexical_index

# pg_advisory_xact_lock(class, version id): one process at a time turns rows into index entries.
_LEXICAL_LOCK_CLASS = 15_001
# The columns of an index entry: its text's parts, then the business fields the index filters on.
_ENTRY_COLUMNS = (
    "id", "document_id", "document__context", "content", "doc_type", "created_at", "tags", "metadata", "acl",
)  # fmt: skip


def _lock_lexical_index(version_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LEXICAL_LOCK_CLASS, version_id & 0x7FFFFFFF])


def _analyzed(analyzer: Analyzer, row: tuple[Any, ...]) -> str:
    """The analyzed text of a row of ``_ENTRY_COLUMNS``."""
    _, _, context, content, _, _, _, metadata, _ = row
    return analyzer.analyze(contextual_text(context, content, (metadata or {}).get("section")))


def _entry(row: tuple[Any, ...], tenant_id: int, text: str) -> LexicalDocument:
    """The index entry of a row of ``_ENTRY_COLUMNS`` with its analyzed ``text``."""
    chunk_id, doc_id, _, _, doc_type, created_at, tags, metadata, acl = row
    fields = filter_fields(doc_type, created_at, tags, metadata, acl)
    return LexicalDocument(chunk_id, doc_id, tenant_id, text, fields)


def record_lexical_change(version_id: int, document_ids: list[int]) -> None:
    """Inside the transaction that changes the documents' chunks in the version."""
    PendingLexicalChange.objects.create(kb_version_id=version_id, document_ids=sorted(document_ids))


def apply_pending_lexical_changes(version_id: int, analyzed: dict[int, str] | None = None) -> int:
    """Rewrite the keyword-index entries of the documents with pending changes in a version from their
    committed rows, then clear those changes; returns how many were applied. Idempotent: applying a
    change twice (a kill after the index write) writes the same entries. ``analyzed`` (chunk id ->
    analyzed text) spares analyzing again what the caller just analyzed."""
    analyzed = analyzed or {}
    with transaction.atomic():
        _lock_lexical_index(version_id)
        changes = list(PendingLexicalChange.objects.filter(kb_version_id=version_id).values_list("pk", "document_ids"))
        if not changes:
            return 0
        document_ids = sorted({document_id for _, ids in changes for document_id in ids})
        tenant_id = KnowledgeBase.objects.filter(versions=version_id).values_list("tenant_id", flat=True).get()
        analyzer = analyzer_for_tenant(tenant_id)
        rows = Chunk.objects.filter(kb_version_id=version_id, document_id__in=document_ids)
        entries = [
            _entry(row, tenant_id, analyzed.get(row[0]) or _analyzed(analyzer, row))
            for row in rows.values_list(*_ENTRY_COLUMNS)
        ]
        lexical_index().write(
            version_id,
            entries,
            replacing=document_ids,
            analyzer_version=analyzer.version,
            dictionary_fingerprint=analyzer.dictionary_fingerprint,
        )
        pause_at("index_committed")
        PendingLexicalChange.objects.filter(pk__in=[pk for pk, _ in changes]).delete()
    return len(changes)


def rebuild_lexical_index(version: KnowledgeBaseVersion) -> int:
    """Re-analyze every chunk of a version from the database into a fresh lexical index (after an
    analyzer or dictionary change, or to repair the index); returns the number of chunks.

    The rows are read after the pending changes are, so the rebuild covers those and clears them; a
    change committed meanwhile stays pending and is applied after it (the version's lock orders them)."""
    tenant_id = version.knowledge_base.tenant_id
    analyzer = analyzer_for_tenant(tenant_id)
    with transaction.atomic():
        _lock_lexical_index(version.pk)
        covered = list(PendingLexicalChange.objects.filter(kb_version=version).values_list("pk", flat=True))
        rows = (
            Chunk.objects.filter(kb_version=version, tenant_id=tenant_id)
            .values_list(*_ENTRY_COLUMNS)
            .iterator(chunk_size=2000)
        )
        count = lexical_index().build_version(
            version.pk,
            (_entry(row, tenant_id, _analyzed(analyzer, row)) for row in rows),
            analyzer_version=analyzer.version,
            dictionary_fingerprint=analyzer.dictionary_fingerprint,
        )
        PendingLexicalChange.objects.filter(pk__in=covered).delete()
        KnowledgeBaseVersion.objects.filter(pk=version.pk).update(
            analyzer_version=analyzer.version, revision=F("revision") + 1
        )
    return count


@dataclass
class VersionCheck:
    """How a KB version's rows and keyword index differ (``check_kb``); chunk ids, at most a sample."""

    version: KnowledgeBaseVersion
    chunks: int  # rows
    entries: int  # keyword-index entries
    pending_changes: int  # committed changes not yet applied to the index
    missing: list[int]  # chunks the index lacks
    orphans: list[int]  # entries for chunks the database does not hold
    duplicates: int  # entries beyond the first for a chunk
    documents_without_chunks: list[int]  # ready documents of the KB without chunks (active version only)
    misplaced_chunks: int  # chunks whose document belongs to another knowledge base
    repaired: bool = False

    @property
    def index_drift(self) -> bool:
        return bool(self.pending_changes or self.missing or self.orphans or self.duplicates)

    @property
    def row_drift(self) -> bool:
        """What only a re-ingestion can fix: the rows themselves disagree."""
        return bool(self.documents_without_chunks or self.misplaced_chunks)


def check_version(version: KnowledgeBaseVersion, *, repair: bool = False) -> VersionCheck:
    """Compare a version's chunk rows with its keyword index; with ``repair``, apply the pending
    changes and, if the index still differs, rebuild it from the rows. The result describes what was
    found before repairing. Rows being ingested meanwhile may show as drift for a moment: check again."""
    in_db, entries = _rows_and_entries(version)
    documents = Document.objects.none()
    if version.knowledge_base.active_version_id == version.pk:
        documents = Document.objects.filter(knowledge_base_id=version.knowledge_base_id, status=Document.Status.READY)
        documents = documents.exclude(pk__in=Chunk.objects.filter(kb_version=version).values("document_id"))
    check = VersionCheck(
        version=version,
        chunks=len(in_db),
        entries=entries.total(),
        pending_changes=PendingLexicalChange.objects.filter(kb_version=version).count(),
        missing=sorted(in_db - entries.keys()),
        orphans=sorted(entries.keys() - in_db),
        duplicates=entries.total() - len(entries),
        documents_without_chunks=list(documents.order_by("pk").values_list("pk", flat=True)),
        misplaced_chunks=Chunk.objects.filter(kb_version=version)
        .exclude(document__knowledge_base_id=F("knowledge_base_id"))
        .count(),
    )
    if repair and check.index_drift:
        apply_pending_lexical_changes(version.pk)
        in_db, entries = _rows_and_entries(version)
        if in_db != entries.keys() or entries.total() != len(entries):
            rebuild_lexical_index(version)
        check.repaired = True
    return check


def _rows_and_entries(version: KnowledgeBaseVersion) -> tuple[set[int], Counter[int]]:
    """The version's chunk ids in the database, and its keyword-index entries counted by chunk id."""
    in_db = set(Chunk.objects.filter(kb_version=version).values_list("id", flat=True))
    return in_db, Counter(lexical_index().chunk_ids(version.pk))
