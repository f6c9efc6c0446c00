"""The Ingester: files into one KB version, parse -> chunk -> embed -> write the stores: the vectors with
the chunk rows (``VectorIndex.write``) and the graph (``GraphStore.write``) in one transaction, the keyword
index (``LexicalIndex.write``) from the committed rows through its outbox (``knowledge.lexical``).

Groups of documents are embedded in one background thread and their graphs extracted in another while
this thread prepares the next group and writes the previous one (the model releases the GIL).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.core.files.base import ContentFile
from django.db import transaction

from core.cost import charged_to
from core.faults import pause_at
from core.metrics import record_ingest
from core.tracing import span
from engines.base import Extraction
from engines.embedders import Embedder, EmbeddingError, get_embedder
from engines.llm import LLMError
from engines.llm_triples import with_triples
from engines.metering import counting_cpu
from knowledge.chunk_curation import apply_chunk_edits, sync_edited_chunk_ids
from knowledge.chunking import (
    ChunkDraft,
    chunk_context,
    chunk_parents_and_children,
    chunk_sections,
    chunker_version,
    contextual_text,
    document_context,
)
from knowledge.graph_extraction import graph_extraction
from knowledge.ingestion.chunk_rows import ChunkBatch, chunk_rows
from knowledge.ingestion.files import Labels, SourceFile, keep_original, read_sidecar, record_failure
from knowledge.lexical import apply_pending_lexical_changes, record_lexical_change
from knowledge.models import PARENT_CHILD, Chunk, Document, KnowledgeBase, KnowledgeBaseVersion, ParentChunk
from knowledge.parsing import ParseError, Section, parse_file
from knowledge.revisions import bump_revisions
from knowledge.selectors.search import analyzer_for_tenant
from knowledge.stores import graph_store, vector_index

logger = logging.getLogger(__name__)

# Chunks embedded together: groups grow from the first size, doubling, to the largest, so the model
# starts after a few documents and each group is read while the one before embeds. Smaller groups hide
# more of the other work, larger ones pad less (BENCHMARKS.md, "Ingestion pipeline").
EMBED_FLUSH_CHUNKS = 256
EMBED_FIRST_FLUSH_CHUNKS = 32


@dataclass
class IngestReport:
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    failed: int = 0
    chunks: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)

    def outcomes(self) -> dict[str, int]:
        return {"added": self.added, "unchanged": self.unchanged, "replaced": self.replaced, "failed": self.failed}

    def as_dict(self) -> dict[str, int | float]:
        return {
            "added": self.added,
            "unchanged": self.unchanged,
            "replaced": self.replaced,
            "failed": self.failed,
            "chunks": self.chunks,
            "seconds": round(self.seconds, 2),
        }


@dataclass
class _PendingDocument:
    source: SourceFile
    existing: Document | None
    md5: str
    title: str
    context: str  # embedded and indexed before each chunk (knowledge.chunking.contextual_text)
    doc_type: str
    labels: Labels
    drafts: list[ChunkDraft]
    analyzed: list[str]  # each draft's text as the lexical index stores it
    original: str  # its stored copy, or "" when none is kept
    parse_report: dict[str, Any]  # knowledge.parsing.ParseReport.as_dict()
    text: str  # knowledge.parsing.ParsedDocument.text
    parents: list[ChunkDraft] = field(default_factory=list)  # parent_child: the passages its drafts are children of
    extractions: list[Extraction] = field(default_factory=list)  # each draft's graph entities and relations


class Ingester:
    """Ingests files into one KB version (the active one by default) with that version's model and
    chunking; each document's chunks are swapped atomically.

    Given another ``version`` (a new version being built), it fills that version with the chunks of
    documents the KB already has, and leaves the documents (status, MD5, labels) as they are: they
    describe what the active version serves. ``keep_originals``: store each new or changed file
    (``Document.original``) so the KB can be rebuilt from it. ``raise_embedding_errors``: an embedder
    failure raises (a task retries it: what was written before is unchanged by MD5 the next time)
    instead of marking the pending documents failed.
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        version: KnowledgeBaseVersion | None = None,
        on_progress: Callable[[int], None] | None = None,
        keep_originals: bool = False,
        raise_embedding_errors: bool = False,
    ):
        self.kb = kb
        self.version = version or kb.require_active_version()
        self._fills_new_version = self.version.pk != kb.active_version_id
        self.report = IngestReport()
        self._on_progress = on_progress or (lambda done: None)
        self._keep_originals = keep_originals
        self._raise_embedding_errors = raise_embedding_errors
        self._pending: list[_PendingDocument] = []
        # The group being embedded, with its vectors and its graph extraction to come.
        self._embedding: tuple[list[_PendingDocument], Future[np.ndarray], Future[None]] | None = None
        self._embedder: Embedder | None = None
        self.analyzer = analyzer_for_tenant(kb.tenant_id)
        self.extractor = graph_extraction().entity_extractor(kb.tenant_id, kb.pk)
        self.triples = graph_extraction().triple_extractor()  # None unless GRAPH_LLM_TRIPLES and LLM_URL are set

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.version.embedding_model)
        return self._embedder

    def ingest(self, files: list[SourceFile]) -> IngestReport:
        """Charged to the KB's tenant (``core.cost``): the chunks' embedding tokens, the LLM's triples."""
        with charged_to(self.kb.tenant_id):
            return self._ingest(files)

    def _ingest(self, files: list[SourceFile]) -> IngestReport:
        started = time.perf_counter()
        apply_pending_lexical_changes(self.version.pk)  # what a killed ingestion committed but did not index
        existing = {
            doc.source_uri: doc
            for doc in Document.objects.filter(knowledge_base=self.kb, source_uri__in=[f.source_uri for f in files])
        }
        flush_at = min(EMBED_FIRST_FLUSH_CHUNKS, EMBED_FLUSH_CHUNKS)
        with (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-embed") as embedding,
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-extract") as extracting,
        ):
            for source in files:
                with span("ingest.parse", document=source.source_uri):  # read, parse, chunk, analyze
                    self._prepare(source, existing.get(source.source_uri))
                if sum(len(p.drafts) for p in self._pending) >= flush_at:
                    self._flush(embedding, extracting)
                    flush_at = min(2 * flush_at, EMBED_FLUSH_CHUNKS)
            self._flush(embedding, extracting)
            self._write_embedded()
        self.report.seconds = time.perf_counter() - started
        record_ingest(self.report.outcomes(), self.report.chunks)
        return self.report

    def _prepare(self, source: SourceFile, existing: Document | None) -> None:
        try:
            data = source.path.read_bytes()
            md5 = hashlib.md5(data).hexdigest()
            # A stored original's folder is a scratch copy's: no folder ACL file applies there.
            labels = (
                source.labels
                if source.labels is not None
                else read_sidecar(source.path, "" if source.original else source.source_uri)
            )
            if self._fills_new_version and existing is None:
                raise ParseError("the document was deleted")
            if not self._fills_new_version and not source.force and _unchanged(existing, md5, labels):
                self.report.unchanged += 1
                self._on_progress(1)
                return
            parsed = parse_file(source.path)
            title = (labels.title or parsed.title)[:500]
            context = document_context(title, source.path)
            # The context is read before every chunk: the chunk gets what is left of the model's window
            # beside the longest (at least half of it; a longer one is cut by the model at the chunk's end).
            window = self.embedder.max_tokens
            contexts = {chunk_context(context, section.metadata.get("section")) for section in parsed.sections}
            longest = max((self.embedder.count_tokens(text) for text in contexts if text), default=0)
            budget = max(window - longest, window // 2) if longest else window
            parents, drafts = self._chunk(parsed.sections, budget)
            drafts = apply_chunk_edits(existing, drafts, self.embedder.count_tokens)  # a curator's, kept
        except (OSError, ParseError) as exc:
            self._fail(source, existing, str(exc))
            return
        if not drafts:
            self._fail(source, existing, "no text found")
            return
        analyzed = [
            self.analyzer.analyze(contextual_text(context, draft.text, draft.metadata.get("section")))
            for draft in drafts
        ]
        original = source.original
        if not original and self._keep_originals:
            original = keep_original(self.kb, source.path.name, md5, ContentFile(data))
        self._pending.append(
            _PendingDocument(
                source, existing, md5, title, context, parsed.doc_type, labels, drafts, analyzed, original,
                parsed.report.as_dict(), parsed.text, parents,
            )
        )  # fmt: skip

    def _chunk(self, sections: list[Section], budget: int) -> tuple[list[ChunkDraft], list[ChunkDraft]]:
        """The version's chunks of a document (its children, under ``parent_child``) and their parents
        (none for plain chunks); each chunk fits ``budget``, the model's window beside its context."""
        size, overlap, count = (
            min(self.version.chunk_size, budget),
            self.version.chunk_overlap,
            self.embedder.count_tokens,
        )
        if self.version.chunking != PARENT_CHILD:
            return [], chunk_sections(
                sections, count_tokens=count, chunk_size=size, chunk_overlap=overlap, max_tokens=budget
            )
        return chunk_parents_and_children(
            sections, count_tokens=count, child_size=size, child_overlap=overlap,
            parent_size=self.version.parent_chunk_size or size, max_tokens=budget,
        )  # fmt: skip

    def _extract(self, pending: list[_PendingDocument]) -> None:
        """Each pending document's graph entities and relations (in the extraction thread)."""
        with span("ingest.extract", documents=len(pending)):
            for doc in pending:
                doc.extractions = [self.extractor.extract(draft.text) for draft in doc.drafts]
                if self.triples is not None:
                    doc.extractions = self._typed(doc.source.source_uri, doc.drafts, doc.extractions)

    def _typed(self, source_uri: str, drafts: list[ChunkDraft], extractions: list[Extraction]) -> list[Extraction]:
        """The passages' relations typed by the LLM (one bounded call per document); whatever fails,
        the co-occurrence relations stay, and the ingestion goes on."""
        if self.triples is None:
            return extractions
        try:
            with span("ingest.triples", document=source_uri):
                found = self.triples.triples([draft.text for draft in drafts])
        except LLMError as exc:
            logger.warning(
                "typed graph relations failed: co-occurrence kept",
                extra={"document": source_uri, "cause": exc.cause, "detail": exc.message},
            )
            return extractions
        return [with_triples(self.extractor, extraction, found.get(i, [])) for i, extraction in enumerate(extractions)]

    def _fail(self, source: SourceFile, existing: Document | None, reason: str) -> None:
        if not self._fills_new_version:  # a new version's failure must not touch what searches see
            reason = record_failure(self.kb, source.source_uri, existing, reason).error
        self.report.failed += 1
        self.report.failures.append((source.source_uri, reason))
        self._on_progress(1)

    def _flush(self, embedding: ThreadPoolExecutor, extracting: ThreadPoolExecutor) -> None:
        """Start embedding the pending documents together in ``embedding``'s thread and extracting their
        graph in ``extracting``'s, then write the group before them while they run (groups are written in
        the order they were read)."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        texts = [
            contextual_text(doc.context, draft.text, draft.metadata.get("section"))
            for doc in pending
            for draft in doc.drafts
        ]
        # Their threads' CPU time is charged with the ingestion's (engines.metering).
        vectors = embedding.submit(copy_context().run, counting_cpu(self._embed), texts)
        extracted = extracting.submit(copy_context().run, counting_cpu(self._extract), pending)
        self._write_embedded()
        self._embedding = (pending, vectors, extracted)

    def _embed(self, texts: list[str]) -> np.ndarray:
        with span("ingest.embed", chunks=len(texts)):
            return self.embedder.embed_documents(texts)

    def _write_embedded(self) -> None:
        """Wait for the group being embedded, then swap its documents' chunks in one transaction with a few
        statements for the whole group (a failure leaves every previous version in place); their
        keyword-index entries follow once the rows are committed (see ``apply_pending_lexical_changes``).
        A group the embedder fails fails its own documents only."""
        if self._embedding is None:
            return
        (pending, embedded, extracted), self._embedding = self._embedding, None
        try:
            vectors = embedded.result()
        except EmbeddingError as exc:
            if self._raise_embedding_errors:
                raise
            for doc in pending:
                self._fail(doc.source, doc.existing, f"embedding failed: {exc}")
            return
        extracted.result()
        with span("ingest.write", documents=len(pending)), transaction.atomic():
            documents = self._lock_documents(pending) if self._fills_new_version else self._upsert_documents(pending)
            replaced = Chunk.objects.filter(document__in=[doc.pk for doc in documents], kb_version=self.version)
            # while the replaced chunks exist: the graph forgets what only they mentioned
            replaced_ids = list(replaced.values_list("id", flat=True))
            graph, index = graph_store(), vector_index()
            graph.delete(self.kb.tenant_id, self.version.pk, replaced_ids)
            index.delete(self.version.pk, replaced_ids)
            replaced.delete()
            parent_ids = self._replace_parents(documents, pending)
            batches, offset = [], 0
            for document, doc in zip(documents, pending, strict=True):
                vectors_of = vectors[offset : offset + len(doc.drafts)]
                batches.append(
                    ChunkBatch(document, doc.drafts, vectors_of, doc.labels, parent_ids.get(document.pk, []))
                )
                offset += len(doc.drafts)
            index.write(chunk_rows(self.kb, self.version, batches))
            if not self._fills_new_version:
                sync_edited_chunk_ids([document.pk for document in documents], self.version)
            rows = list(
                Chunk.objects.filter(document__in=documents, kb_version=self.version).values_list(
                    "id", "document_id", "ordinal"
                )
            )
            analyzed = self._analyzed_by_chunk_id(documents, pending, rows)
            by_document = dict(zip((document.pk for document in documents), pending, strict=True))
            graph.write(self.kb.tenant_id, self.version.pk, {
                chunk_id: by_document[doc_id].extractions[ordinal] for chunk_id, doc_id, ordinal in rows
            })  # fmt: skip
            record_lexical_change(self.version.pk, [document.pk for document in documents])
            bump_revisions([self.version.pk])
            pause_at("rows_written")
        pause_at("rows_committed")
        with span("ingest.index"):
            apply_pending_lexical_changes(self.version.pk, analyzed)
        for doc in pending:
            # An upload's pending row was never ingested, a removed one had left: their chunks are an addition.
            added = doc.existing is None or doc.existing.status in (Document.Status.PENDING, Document.Status.REMOVED)
            self.report.added += added
            self.report.replaced += not added
            self.report.chunks += len(doc.drafts)
            self._on_progress(1)

    def _replace_parents(self, documents: list[Document], pending: list[_PendingDocument]) -> dict[int, list[int]]:
        """Inside the chunk swap's transaction: the documents' parent passages in this version replaced by
        the new ones (none for plain chunks); each document's new parent ids, in the parents' order."""
        if self.version.chunking != PARENT_CHILD:  # a version's chunking never changes: it has no parents
            return {}
        ParentChunk.objects.filter(
            document__in=[document.pk for document in documents], kb_version=self.version
        ).delete()
        rows = [
            ParentChunk(
                document=document, kb_version=self.version, tenant_id=self.kb.tenant_id, ordinal=ordinal,
                content=parent.text, content_hash=parent.content_hash, token_count=parent.token_count,
                metadata={**parent.metadata, **doc.labels.metadata},
            )
            for document, doc in zip(documents, pending, strict=True)
            for ordinal, parent in enumerate(doc.parents)
        ]  # fmt: skip
        parent_ids: dict[int, list[int]] = {}
        for row in ParentChunk.objects.bulk_create(rows):
            parent_ids.setdefault(row.document_id, []).append(row.pk)
        return parent_ids

    def _lock_documents(self, pending: list[_PendingDocument]) -> list[Document]:
        """The existing rows, locked like an upsert locks them: two writers of one document's chunks in
        a version (a build and an upload landing in it) take turns, so it never gets two chunk sets."""
        existing = [doc.existing for doc in pending if doc.existing is not None]
        if len(existing) != len(pending):  # a new version is filled with the KB's documents only
            raise ValueError("a document to lock has no row")
        locked = Document.objects.select_for_update().in_bulk([document.pk for document in existing])
        return [locked[document.pk] for document in existing]

    def _upsert_documents(self, pending: list[_PendingDocument]) -> list[Document]:
        """One INSERT .. ON CONFLICT for the group (a concurrent ingester of the same file updates
        instead of failing); ``created_at`` of an existing row is kept. A re-ingestion that keeps a
        document's ACL reads it under a lock first, so an ACL set meanwhile (knowledge.acls) is kept."""
        kept = [doc.existing.pk for doc in pending if doc.labels.acl is None and doc.existing is not None]
        if kept:
            current = dict(Document.objects.select_for_update().filter(pk__in=kept).values_list("pk", "acl"))
            for doc in pending:
                if doc.existing is not None and doc.existing.pk in current:
                    doc.existing.acl = current[doc.existing.pk]
        rows = [
            Document(
                knowledge_base=self.kb,
                tenant_id=self.kb.tenant_id,
                source_uri=doc.source.source_uri,
                title=doc.title,
                context=doc.context,
                doc_type=doc.doc_type,
                content_md5=doc.md5,
                chunker_version=chunker_version(doc.doc_type),
                status=Document.Status.READY,
                error="",
                tags=doc.labels.tags,
                metadata=doc.labels.metadata,
                acl=_acl_of(doc),
                chunk_count=len(doc.drafts),
                parse_report=doc.parse_report,
                extracted_text=doc.text,
                original=doc.original,
                removed_at=None,
            )
            for doc in pending
        ]
        documents = Document.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["knowledge_base", "source_uri"],
            update_fields=[
                "title", "context", "doc_type", "content_md5", "chunker_version", "status", "error", "tags",
                "metadata", "acl", "chunk_count", "parse_report", "extracted_text", "original", "removed_at", "updated_at",
            ],
        )  # fmt: skip
        for document, doc in zip(documents, pending, strict=True):
            if doc.existing is not None:  # the row kept its first ingestion time; so do its chunks
                document.created_at = doc.existing.created_at
        return documents

    def _analyzed_by_chunk_id(
        self, documents: list[Document], pending: list[_PendingDocument], rows: list[tuple[int, int, int]]
    ) -> dict[int, str]:
        """The analyzed text of each chunk just written (``rows``: id, document id, ordinal), by its new
        id (so the index write after the commit need not analyze again)."""
        analyzed = {
            (document.pk, ordinal): text
            for document, doc in zip(documents, pending, strict=True)
            for ordinal, text in enumerate(doc.analyzed)
        }
        return {chunk_id: analyzed[(doc_id, ordinal)] for chunk_id, doc_id, ordinal in rows}


def _acl_of(doc: _PendingDocument) -> list[str]:
    """The ACL a document row gets: its labels' (empty: the KB's default), or, for a re-ingestion that
    queued none, the one it has (docs/permissions.md)."""
    if doc.labels.acl is not None:
        return doc.labels.acl
    return list(doc.existing.acl) if doc.existing is not None else []


def _unchanged(existing: Document | None, md5: str, labels: Labels) -> bool:
    """Same bytes, same sidecar labels and the same chunker as the ready document: nothing to do."""
    return (
        existing is not None
        and existing.status == Document.Status.READY
        and existing.content_md5 == md5
        and existing.chunker_version == chunker_version(existing.doc_type)
        and existing.tags == labels.tags
        and existing.metadata == labels.metadata
        and (labels.acl is None or existing.acl == labels.acl)
        and (labels.title is None or existing.title == labels.title)
    )
