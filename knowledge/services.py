"""Writes for knowledge bases: creation, ingestion of files, and the vector indexes they need."""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import copy_context
from dataclasses import asdict, dataclass, field
from itertools import islice
from datetime import timedelta
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile, File
from django.core.files.storage import Storage
from django.db import connection, transaction
from django.db.models import Case, Count, F, Max, Q, Value, When
from django.utils import timezone
from psycopg import sql
from psycopg.types.json import Jsonb

from knowledge.chunking import (
    ChunkDraft,
    chunk_context,
    chunk_sections,
    chunker_version,
    contextual_text,
    document_context,
)
from knowledge.errors import UploadTooLarge, VersionConflict
from knowledge.models import (
    Chunk,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    KnowledgeTask,
    PendingLexicalChange,
    current_graph_extractor,
    originals_storage,
)
from knowledge.search_settings import clean_search_settings
from knowledge.selectors import analyzer_for_tenant, entity_extractor_for_tenant, triple_extractor
from knowledge.stores import graph_store, vector_index
from knowledge.parsing import SUPPORTED_SUFFIXES, ParseError, doc_type_for, parse_file
from engines.embedders import Embedder, EmbeddingError, get_embedder
from engines import get_lexical_index
from engines.pgvector_index import register_vector_type
from engines.base import Extraction, LexicalDocument, SearchScope, SqlFilter
from engines.llm import LLMError
from engines.llm_triples import with_triples
from core.metrics import record_ingest
from core.usage import frequent_queries
from core.tracing import span
from tenants.models import Tenant
from tenants.services import stamp_vocabulary_change

logger = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".meta.json"
# Chunks from several files are embedded and written together. A group embeds in the background while
# the next is prepared and the previous one written, so smaller groups hide more of that work; larger
# ones pad less in torch's batches of 32 (256 -> 1024: 1.27 -> 1.24 padded tokens per real token on
# SciFact), hardly at all in ONNX Runtime's batches of 4 (BENCHMARKS.md, "Ingestion pipeline").
EMBED_FLUSH_CHUNKS = 256
# The model waits for the first group to be read; groups grow from this size, doubling up to
# EMBED_FLUSH_CHUNKS, so it starts after a few documents and each group is read while the one before embeds.
EMBED_FIRST_FLUSH_CHUNKS = 32


# --- knowledge bases ------------------------------------------------------------------------------


@transaction.atomic
def create_knowledge_base(
    *,
    tenant: Tenant,
    name: str,
    embedding_model: str | None = None,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    languages: list[str] | None = None,
    description: str = "",
) -> KnowledgeBase:
    """A KB with an empty active version 1, sized for its embedding model."""
    kb = KnowledgeBase.objects.create(
        tenant=tenant,
        name=name,
        description=description,
        **index_settings(embedding_model, chunk_size, chunk_overlap, languages),
    )
    activate_first_version(kb)
    return kb


def update_search_settings(
    kb: KnowledgeBase, search_settings: dict, *, version: KnowledgeBaseVersion | None = None
) -> dict:
    """Replace the KB's search settings, or ``version``'s (one of the KB's); returns them as stored.
    Validated here (``ValidationError``), so the admin, the API and commands store the same thing.
    Cached answers need no purge: the search cache key holds the settings a search used."""
    cleaned = clean_search_settings(search_settings)
    target = kb if version is None else version
    if version is not None and version.knowledge_base_id != kb.pk:
        raise ValueError(f"version {version.pk} is not a version of knowledge base {kb.pk}")
    target.search_settings = cleaned
    target.save(update_fields=["search_settings"])
    return cleaned


def index_settings(
    embedding_model: str | None, chunk_size: int | None, chunk_overlap: int | None, languages: list[str] | None
) -> dict:
    """Model, dimension, chunking (capped for the model) and languages of a KB or version; omitted
    values take the service defaults. Loads the model: ``EmbeddingError`` for an unusable one."""
    embedder = get_embedder(embedding_model)
    size = min(chunk_size or settings.CHUNK_SIZE_TOKENS, embedder.max_tokens)
    return {
        "embedding_model": embedder.model_name,
        "embedding_dim": embedder.dimension,
        "chunk_size": size,
        "chunk_overlap": min(settings.CHUNK_OVERLAP_TOKENS if chunk_overlap is None else chunk_overlap, size // 2),
        "languages": list(embedder.languages) if languages is None else languages,
    }


VERSION_SETTINGS = ("embedding_model", "embedding_dim", "chunk_size", "chunk_overlap", "languages")


def activate_first_version(kb: KnowledgeBase) -> KnowledgeBaseVersion:
    """Version 1, empty and active, with the KB's settings and the vector index its dimension needs."""
    version = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=1,
        status=KnowledgeBaseVersion.Status.ACTIVE,
        activated_at=timezone.now(),
        **{name: getattr(kb, name) for name in VERSION_SETTINGS},
    )
    kb.active_version = version
    kb.save(update_fields=["active_version"])
    vector_index().ensure_index(kb.embedding_dim)
    return version


def delete_knowledge_base(kb: KnowledgeBase) -> None:
    """Remove a KB with its versions, documents and chunks, then each version's lexical index and graph.

    The indexes go once the rows are gone for good (after the commit), so a rolled-back delete
    leaves a searchable KB; an index that fails to drop is logged, and nothing searches it again."""
    version_ids = list(kb.versions.values_list("pk", flat=True))
    tenant_id = kb.tenant_id
    with transaction.atomic():
        kb.delete()
        transaction.on_commit(lambda: _drop_version_indexes(tenant_id, version_ids), robust=True)


@transaction.atomic
def delete_tenant(tenant: Tenant) -> None:
    """Remove a tenant with everything it owns; its knowledge bases go through
    :func:`delete_knowledge_base`, so their lexical indexes go too (hence here, not in ``tenants``)."""
    for kb in tenant.knowledge_bases.all():
        delete_knowledge_base(kb)
    tenant.delete()


def _drop_version_indexes(tenant_id: int, version_ids: list[int]) -> None:
    """The versions' graphs (the PostgreSQL one went with the rows; Neo4j keeps it until told), then
    their lexical indexes."""
    graph_store().drop_versions(tenant_id, version_ids)
    for version_id in version_ids:
        get_lexical_index().drop(version_id)


def get_or_create_knowledge_base(*, tenant: Tenant, name: str, **options) -> tuple[KnowledgeBase, bool]:
    kb = KnowledgeBase.objects.filter(tenant=tenant, name=name).select_related("active_version").first()
    if kb is not None:
        return kb, False
    return create_knowledge_base(tenant=tenant, name=name, **options), True


# --- ingestion ------------------------------------------------------------------------------------


def keep_original(kb: KnowledgeBase, name: str, md5: str, content: File) -> str:
    """Store a file's bytes for rebuilds; returns its storage name. Addressed by KB and content, so
    storing the same file again (a retried upload, an unchanged re-ingest) writes nothing."""
    storage = originals_storage()
    path = f"kb-{kb.pk}/{md5}/{storage.get_valid_name(name)}"
    return path if storage.exists(path) else storage.save(path, content)


@dataclass
class _Labels:
    """What a document's sidecar (``<file>.meta.json``) may set: title, tags and metadata."""

    title: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SourceFile:
    """A file to ingest. ``labels`` given (an upload's): they replace the sidecar; ``original``: the
    stored copy the file already is (else the Ingester keeps one when asked to); ``force``: re-chunk
    and re-embed it even when unchanged (a re-ingest asked for)."""

    path: Path
    source_uri: str
    labels: _Labels | None = None
    original: str = ""
    force: bool = False


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

    def as_dict(self) -> dict:
        return {
            "added": self.added,
            "unchanged": self.unchanged,
            "replaced": self.replaced,
            "failed": self.failed,
            "chunks": self.chunks,
            "seconds": round(self.seconds, 2),
        }


def discover_files(paths: Iterable[Path]) -> list[SourceFile]:
    """Supported files under the given paths. A file's URI is its path from the folder given
    (``sample_kb/faq/x.csv``), or its name when given directly, so URIs do not depend on the cwd."""
    found: dict[str, SourceFile] = {}
    for root in paths:
        root = Path(root)
        if root.is_dir():
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                if path.suffix.lower() in SUPPORTED_SUFFIXES and not path.name.endswith(SIDECAR_SUFFIX):
                    uri = f"{root.resolve().name}/{path.relative_to(root).as_posix()}"
                    found.setdefault(uri, SourceFile(path, uri))
        elif root.is_file():
            found.setdefault(root.name, SourceFile(root, root.name))
        else:
            raise FileNotFoundError(f"no such file or directory: {root}")
    return list(found.values())


def _read_sidecar(path: Path) -> _Labels:
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    if not sidecar.exists():
        return _Labels()
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ParseError(f"metadata file {sidecar.name} is not valid JSON: {exc}") from exc
    return labels_from(data, where=f"metadata file {sidecar.name}")


def labels_from(data: object, *, where: str = "metadata") -> _Labels:
    """Title, tags and metadata from a sidecar's or an upload's JSON; ``ParseError`` names what is wrong."""
    if not isinstance(data, dict):
        raise ParseError(f"{where} must hold a JSON object")
    tags, metadata, title = data.get("tags", []), data.get("metadata", {}), data.get("title")
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ParseError(f"{where}: 'tags' must be a list of strings")
    if not isinstance(metadata, dict):
        raise ParseError(f"{where}: 'metadata' must be an object")
    if title is not None and not isinstance(title, str):
        raise ParseError(f"{where}: 'title' must be a string")
    return _Labels(title=title, tags=tags, metadata=metadata)


@dataclass
class _PendingDocument:
    source: SourceFile
    existing: Document | None
    md5: str
    title: str
    context: str  # embedded and indexed before each chunk (knowledge.chunking.contextual_text)
    doc_type: str
    labels: _Labels
    drafts: list[ChunkDraft]
    analyzed: list[str]  # each draft's text as the lexical index stores it
    original: str  # its stored copy, or "" when none is kept
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
        self.version = version or kb.active_version
        self._fills_new_version = self.version.pk != kb.active_version_id
        self.report = IngestReport()
        self._on_progress = on_progress or (lambda done: None)
        self._keep_originals = keep_originals
        self._raise_embedding_errors = raise_embedding_errors
        self._pending: list[_PendingDocument] = []
        # The group being embedded, with its vectors and its graph extraction to come.
        self._embedding: tuple[list[_PendingDocument], Future, Future] | None = None
        self._embedder: Embedder | None = None
        self.analyzer = analyzer_for_tenant(kb.tenant_id)
        self.extractor = entity_extractor_for_tenant(kb.tenant_id)
        self.triples = triple_extractor()  # None unless GRAPH_LLM_TRIPLES and LLM_URL are set

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.version.embedding_model)
        return self._embedder

    def ingest(self, files: list[SourceFile]) -> IngestReport:
        started = time.perf_counter()
        apply_pending_lexical_changes(self.version.pk)  # what a killed ingestion committed but did not index
        existing = {
            doc.source_uri: doc
            for doc in Document.objects.filter(knowledge_base=self.kb, source_uri__in=[f.source_uri for f in files])
        }
        # One thread embeds a group while this one prepares the next group and writes the previous one:
        # the model releases the GIL, so parsing, analysis and the writes overlap it. Another extracts the
        # group's graph entities: pure Python, it overlaps the model and this thread's database waits.
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
            labels = source.labels if source.labels is not None else _read_sidecar(source.path)
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
            drafts = chunk_sections(
                parsed.sections,
                count_tokens=self.embedder.count_tokens,
                chunk_size=min(self.version.chunk_size, budget),
                chunk_overlap=self.version.chunk_overlap,
                max_tokens=budget,
            )
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
            _PendingDocument(source, existing, md5, title, context, parsed.doc_type, labels, drafts, analyzed, original)
        )

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
        vectors = embedding.submit(copy_context().run, self._embed, texts)
        extracted = extracting.submit(copy_context().run, self._extract, pending)
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
            graph_store().replace_chunks(self.kb.tenant_id, self.version.pk, replaced_ids, {})
            replaced.delete()
            batches, offset = [], 0
            for document, doc in zip(documents, pending, strict=True):
                batches.append(ChunkBatch(document, doc.drafts, vectors[offset : offset + len(doc.drafts)], doc.labels))
                offset += len(doc.drafts)
            _copy_chunks(self.kb, self.version, batches)
            rows = list(
                Chunk.objects.filter(document__in=documents, kb_version=self.version).values_list(
                    "id", "document_id", "ordinal"
                )
            )
            analyzed = self._analyzed_by_chunk_id(documents, pending, rows)
            by_document = dict(zip((document.pk for document in documents), pending, strict=True))
            graph_store().replace_chunks(self.kb.tenant_id, self.version.pk, [], {
                chunk_id: by_document[doc_id].extractions[ordinal] for chunk_id, doc_id, ordinal in rows
            })  # fmt: skip
            _record_lexical_change(self.version.pk, [document.pk for document in documents])
            bump_revision(self.version)
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

    def _lock_documents(self, pending: list[_PendingDocument]) -> list[Document]:
        """The existing rows, locked like an upsert locks them: two writers of one document's chunks in
        a version (a build and an upload landing in it) take turns, so it never gets two chunk sets."""
        locked = Document.objects.select_for_update().in_bulk([doc.existing.pk for doc in pending])
        return [locked[doc.existing.pk] for doc in pending]

    def _upsert_documents(self, pending: list[_PendingDocument]) -> list[Document]:
        """One INSERT .. ON CONFLICT for the group (a concurrent ingester of the same file updates
        instead of failing); ``created_at`` of an existing row is kept."""
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
                chunk_count=len(doc.drafts),
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
                "metadata", "chunk_count", "original", "removed_at", "updated_at",
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


# --- ingestion through the worker ---------------------------------------------------------------
# A task gets JSON: the KB id and, per file, {"source_uri", "original" (storage name), "labels"}, and
# "force": true for a re-ingest (re-chunked and re-embedded even when unchanged).


def check_upload_size(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise UploadTooLarge(f"{what} is larger than the allowed maximum of {limit} bytes", details={"limit": limit})


def check_upload_sizes(uploads: Sequence[File]) -> None:
    """The upload limits: ``UploadTooLarge`` (413) for a file above ``UPLOAD_MAX_FILE_BYTES``, or files
    together above ``UPLOAD_MAX_REQUEST_BYTES``."""
    for upload in uploads:
        check_upload_size(upload.size, settings.UPLOAD_MAX_FILE_BYTES, upload.name)
    check_upload_size(sum(upload.size for upload in uploads), settings.UPLOAD_MAX_REQUEST_BYTES, "the files together")


def queue_uploads(
    kb: KnowledgeBase, uploads: Sequence[File], labels: _Labels | None
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
            try:
                doc_type = doc_type_for(Path(name))
            except ParseError as exc:
                documents.append(record_failure(kb, name, existing.get(name), str(exc)))
                continue
            original = keep_original(kb, name, _md5_of(upload), upload)
            document, _ = Document.objects.get_or_create(
                knowledge_base=kb,
                source_uri=name,
                defaults={
                    "tenant_id": kb.tenant_id, "title": Path(name).stem, "doc_type": doc_type, "original": original,
                },  # fmt: skip
            )  # a new document is pending (the model's default) until the task ingests it; its original is
            # recorded at once, so it can be re-ingested even if this ingestion fails
            documents.append(document)
            files.append(task_file(name, original, labels))
        task = _queue_ingestion(kb, files)
    return task, documents


def queue_files(kb: KnowledgeBase, sources: Sequence[SourceFile]) -> KnowledgeTask:
    """Keep local files (``manage.py ingest --async``) and queue their ingestion with their sidecar
    labels; a file that cannot be read, or whose sidecar is invalid, is recorded failed at once."""
    with transaction.atomic():
        files, _ = store_local_files(kb, sources)
        return _queue_ingestion(kb, files)


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
        labels = _Labels(title=doc.title, tags=doc.tags, metadata=doc.metadata) if doc.content_md5 else None
        files.append({**task_file(doc.source_uri, doc.original, labels), "force": True})
    if not files:
        return None, skipped
    with transaction.atomic():
        return _queue_ingestion(kb, files), skipped


def store_local_files(kb: KnowledgeBase, sources: Sequence[SourceFile]) -> tuple[list[dict], list[tuple[str, str]]]:
    """Keep local files in the originals storage, as task files with their sidecar labels; a file that
    cannot be read, or whose sidecar is invalid, is recorded failed. Returns (task files, failures)."""
    files, failures = [], []
    for source in sources:
        try:
            data, labels = source.path.read_bytes(), _read_sidecar(source.path)
        except (OSError, ParseError) as exc:
            existing = Document.objects.filter(knowledge_base=kb, source_uri=source.source_uri).first()
            failures.append((source.source_uri, record_failure(kb, source.source_uri, existing, str(exc)).error))
            continue
        original = keep_original(kb, source.path.name, hashlib.md5(data).hexdigest(), ContentFile(data))
        files.append(task_file(source.source_uri, original, labels))
    return files, failures


def ingest_stored_files(kb: KnowledgeBase, files: list[dict], *, on_progress: Callable[[int], None]) -> IngestReport:
    """What an ingestion task runs: the stored originals through the Ingester into the active version,
    then into any version being built (so it does not miss them). An embedder failure raises so the
    task retries (documents written before it are then unchanged by MD5)."""
    with _stored_sources(files) as sources:
        report = Ingester(kb, on_progress=on_progress, raise_embedding_errors=True).ingest(sources)
        for version in kb.versions.filter(status=KnowledgeBaseVersion.Status.BUILDING):
            Ingester(kb, version=version, raise_embedding_errors=True).ingest(sources)
    return report


@contextmanager
def _stored_sources(files: list[dict]) -> Iterator[list[SourceFile]]:
    """Task files as local sources (copies in a scratch folder when the storage has no local paths)."""
    storage = originals_storage()
    with tempfile.TemporaryDirectory(prefix="ingest-") as scratch:
        yield [
            SourceFile(
                _local_copy(storage, item["original"], Path(scratch) / str(position)),
                item["source_uri"],
                labels=_Labels(**item["labels"]) if item["labels"] is not None else None,
                original=item["original"],
                force=item.get("force", False),
            )
            for position, item in enumerate(files)
        ]


def fail_pending_documents(kb_id: int, files: list[dict], reason: str) -> None:
    """After a task gave up: its documents still ``pending`` are failed, so none waits forever."""
    Document.objects.filter(
        knowledge_base_id=kb_id, source_uri__in=[item["source_uri"] for item in files], status=Document.Status.PENDING
    ).update(status=Document.Status.FAILED, error=reason)


def _queue_ingestion(kb: KnowledgeBase, files: list[dict]) -> KnowledgeTask:
    from knowledge.tasks import ingest_documents  # here: the tasks module imports this one

    return queue_task(kb, KnowledgeTask.Kind.INGEST, ingest_documents, (kb.pk, files))


def queue_task(kb: KnowledgeBase, kind: str, task, args: tuple) -> KnowledgeTask:
    """Record the task for its tenant, then send it once the transaction commits (the worker must
    see the rows)."""
    record = KnowledgeTask.objects.create(
        task_id=str(uuid.uuid4()), tenant_id=kb.tenant_id, knowledge_base=kb, kind=kind
    )
    transaction.on_commit(lambda: task.apply_async(args, task_id=record.task_id))
    return record


# --- versions (blue-green) --------------------------------------------------------------------------


def start_version_build(
    kb: KnowledgeBase,
    *,
    activate: bool,
    embedding_model: str | None = None,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    languages: list[str] | None = None,
) -> tuple[KnowledgeBaseVersion, KnowledgeTask]:
    """A new version (settings omitted: the active version's; languages: the new model's when the model
    changes), built by a task from the stored originals while searches keep reading the active version;
    ``activate``: switch to it once it validates. One version builds at a time."""
    active = kb.active_version
    if embedding_model is None:
        embedding_model, languages = active.embedding_model, active.languages if languages is None else languages
    index = index_settings(
        embedding_model,
        chunk_size or active.chunk_size,
        active.chunk_overlap if chunk_overlap is None else chunk_overlap,
        languages,
    )
    vector_index().ensure_index(index["embedding_dim"])
    from knowledge.tasks import build_version  # here: the tasks module imports this one

    with transaction.atomic():
        KnowledgeBase.objects.select_for_update().filter(pk=kb.pk).first()  # version numbers one at a time
        building = kb.versions.filter(status=KnowledgeBaseVersion.Status.BUILDING).first()
        if building is not None:
            raise VersionConflict(f"version {building.number} is still building")
        number = (kb.versions.aggregate(Max("number"))["number__max"] or 0) + 1
        # Settings measured on the active version carry over while the model does (not across models).
        same_model = index["embedding_model"] == active.embedding_model
        search_settings = active.search_settings if same_model else {}
        version = KnowledgeBaseVersion.objects.create(
            knowledge_base=kb, number=number, search_settings=search_settings, **index
        )
        task = queue_task(kb, KnowledgeTask.Kind.BUILD_VERSION, build_version, (version.pk, activate))
    return version, task


def version_build_files(version: KnowledgeBaseVersion) -> list[dict]:
    """What a build re-ingests: every ready document of the KB, from its stored original and labels."""
    documents = Document.objects.filter(knowledge_base_id=version.knowledge_base_id, status=Document.Status.READY)
    return [
        task_file(doc.source_uri, doc.original, _Labels(title=doc.title, tags=doc.tags, metadata=doc.metadata))
        for doc in documents.exclude(original="").order_by("pk")
    ]


def fill_version(
    version: KnowledgeBaseVersion, files: list[dict], *, on_progress: Callable[[int], None]
) -> KnowledgeBaseVersion:
    """Fill a building version (re-parse, re-chunk, re-embed, new keyword index), then validate it:
    ``ready`` when every ready document of the KB has chunks in it and a sample of the tenant's recent
    queries is answered by it without error, else ``failed`` naming what is missing or failed."""
    kb = KnowledgeBase.objects.select_related("active_version").get(pk=version.knowledge_base_id)
    with _stored_sources(files) as sources:
        report = Ingester(kb, version=version, on_progress=on_progress, raise_embedding_errors=True).ingest(sources)
    missing = list(
        Document.objects.filter(knowledge_base=kb, status=Document.Status.READY)
        .exclude(pk__in=Chunk.objects.filter(kb_version=version).values("document_id"))
        .order_by("source_uri")
        .values_list("source_uri", flat=True)
    )
    reasons = dict(report.failures)
    version.error = "; ".join(f"{uri}: {reasons.get(uri, 'no stored original')}" for uri in missing[:20])
    if not missing:
        version.error = _sample_queries_failure(kb, version)
    version.status = KnowledgeBaseVersion.Status.FAILED if version.error else KnowledgeBaseVersion.Status.READY
    version.finished_at = timezone.now()
    version.save(update_fields=["status", "error", "finished_at"])
    return version


# A new version must answer this many of the tenant's most frequent recent queries (core.usage) before it is ready.
VALIDATION_QUERIES = 20


def _sample_queries_failure(kb: KnowledgeBase, version: KnowledgeBaseVersion) -> str:
    """Each sampled query through both legs of the new version (its model embeds the query for its
    vectors; its keyword index takes the analyzed tokens): '' when all answer, else why the first failed."""
    queries = frequent_queries(kb.tenant_id, VALIDATION_QUERIES)
    if not queries:
        return ""
    embedder, analyzer = get_embedder(version.embedding_model), analyzer_for_tenant(kb.tenant_id)
    scope = SearchScope(kb.tenant_id, (version.pk,), version.embedding_dim)
    for query in queries:
        try:
            vector_index().search(scope, embedder.embed_query(query), 10, SqlFilter())
            get_lexical_index().search(version.pk, kb.tenant_id, analyzer.tokens(query), 10, None)
        except Exception as exc:  # any failure of the new version keeps it from searches
            return f"the recent query {query!r} failed on this version: {type(exc).__name__}: {exc}"
    return ""


def fail_version(version_id: int, reason: str) -> None:
    """A build that gave up: its version is ``failed`` (never activated), with the reason."""
    KnowledgeBaseVersion.objects.filter(pk=version_id, status=KnowledgeBaseVersion.Status.BUILDING).update(
        status=KnowledgeBaseVersion.Status.FAILED, error=reason, finished_at=timezone.now()
    )


def activate_version(version: KnowledgeBaseVersion) -> KnowledgeBaseVersion:
    """Switch the KB's searches to ``version`` in one transaction: the active one is retired (kept, so
    activating it again is the rollback: instant, nothing re-embedded). The KB takes the version's
    model and chunking; both versions' revisions move on, so no cached answer of either is reused."""
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=version.knowledge_base_id)
        version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
        if version.pk == kb.active_version_id:
            return version
        if version.status not in (KnowledgeBaseVersion.Status.READY, KnowledgeBaseVersion.Status.RETIRED):
            raise VersionConflict(
                f"version {version.number} is {version.status}: only a ready or retired one can be activated"
            )
        _switch_versions(kb.active_version_id, version)
        for name in VERSION_SETTINGS:
            setattr(kb, name, getattr(version, name))
        kb.active_version = version
        kb.save(update_fields=[*VERSION_SETTINGS, "active_version"])
        _count_chunks_of(kb, version)
    return version


def _switch_versions(previous_id: int, version: KnowledgeBaseVersion) -> None:
    """In one statement (each costs a round trip, 10-20 ms on a loaded machine): ``version`` active,
    the previous one retired, both revisions moved on."""
    now, active = timezone.now(), KnowledgeBaseVersion.Status.ACTIVE
    this = Q(pk=version.pk)
    KnowledgeBaseVersion.objects.filter(pk__in=[previous_id, version.pk]).update(
        status=Case(When(this, then=Value(active)), default=Value(KnowledgeBaseVersion.Status.RETIRED)),
        activated_at=Case(When(this, then=Value(now)), default=F("activated_at")),
        retired_at=Case(When(this, then=F("retired_at")), default=Value(now)),
        revision=F("revision") + 1,
    )
    version.status, version.activated_at, version.revision = active, now, version.revision + 1



def _count_chunks_of(kb: KnowledgeBase, version: KnowledgeBaseVersion) -> None:
    """Set each document's chunk count to what ``version`` holds of it, writing only the rows whose
    count changes. Counted in one pass over the version's chunks, compared here, and written by id:
    statements whose plans do not depend on statistics, which a version just built has not got yet
    (a correlated count per document, and the same as one joined UPDATE, planned as nested loops over
    the fresh rows, took 0.4-2.6 s for 1,000 documents under load, inside the switch's transaction)."""
    held = dict(
        Chunk.objects.filter(kb_version=version).order_by().values("document_id").annotate(n=Count("id"))
        .values_list("document_id", "n")
    )
    changed = [
        (document_id, held.get(document_id, 0))
        for document_id, count in Document.objects.filter(knowledge_base=kb).values_list("id", "chunk_count")
        if count != held.get(document_id, 0)
    ]
    if changed:
        ids, counts = zip(*changed)
        with connection.cursor() as cursor:
            cursor.execute(_SET_CHUNK_COUNTS_SQL, [list(ids), list(counts)])


_SET_CHUNK_COUNTS_SQL = (
    f"UPDATE {Document._meta.db_table} AS d SET chunk_count = v.n "
    "FROM unnest(%s::bigint[], %s::integer[]) AS v(id, n) WHERE d.id = v.id"
)


def retire_version(version: KnowledgeBaseVersion) -> KnowledgeBaseVersion:
    """Set aside a ready version that will not be activated: it is purged KB_VERSION_RETENTION_DAYS
    later and can be activated until then. The active version is retired only by activating another;
    a building one cannot be stopped."""
    with transaction.atomic():
        version = KnowledgeBaseVersion.objects.select_for_update().get(pk=version.pk)
        if version.status == KnowledgeBaseVersion.Status.RETIRED:
            return version
        if version.status != KnowledgeBaseVersion.Status.READY:
            hint = {"active": ": activate another version instead"}.get(version.status, "")
            raise VersionConflict(
                f"version {version.number} is {version.status}: only a ready one can be retired{hint}"
            )
        version.status, version.retired_at = KnowledgeBaseVersion.Status.RETIRED, timezone.now()
        version.save(update_fields=["status", "retired_at"])
    return version


def task_file(source_uri: str, original: str, labels: _Labels | None) -> dict:
    return {"source_uri": source_uri, "original": original, "labels": asdict(labels) if labels else None}


def _md5_of(upload: File) -> str:
    digest = hashlib.md5()
    for block in upload.chunks():
        digest.update(block)
    upload.seek(0)
    return digest.hexdigest()


def _local_copy(storage: Storage, name: str, scratch: Path) -> Path:
    """A local path of a stored file: the file itself on a filesystem storage, else a copy in ``scratch``
    (named like the original: parsing reads its suffix)."""
    try:
        return Path(storage.path(name))
    except NotImplementedError:
        scratch.mkdir(parents=True)
        local = scratch / Path(name).name
        with storage.open(name) as stored, open(local, "wb") as copy:
            shutil.copyfileobj(stored, copy)
        return local


def purge_old_versions(retention_days: int) -> int:
    """Delete versions retired, or failed, more than ``retention_days`` ago: their chunks and keyword
    index go with them (no rollback to them any more). Returns how many were purged."""
    cutoff = timezone.now() - timedelta(days=retention_days)
    old = KnowledgeBaseVersion.objects.filter(
        Q(status=KnowledgeBaseVersion.Status.RETIRED, retired_at__lt=cutoff)
        | Q(status=KnowledgeBaseVersion.Status.FAILED, finished_at__lt=cutoff)
    )
    purged = 0
    for version in old:
        with transaction.atomic():
            get_lexical_index().drop(version.pk)
            version.delete()  # its chunks cascade
        purged += 1
    return purged


def bump_revision(version: KnowledgeBaseVersion) -> None:
    """Every content change gets a new revision, so caches and vocabularies keyed on it expire."""
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(revision=F("revision") + 1)


def expire_cached_answers(tenant_id: int) -> None:
    """After a change that alters how a tenant's queries are answered without touching its chunks
    (synonyms, protected terms): renew its vocabulary stamp, which the cache key names, so no cached
    answer is reused and every process reads the new vocabulary (``knowledge.selectors.tenant_vocabulary``)."""
    stamp_vocabulary_change(tenant_id)


def delete_document(document: Document) -> None:
    """Take a document out of every search at once (see :func:`remove_from_search`); a task purges its
    row and stored original once the removal is committed."""
    from knowledge.tasks import purge_documents  # here: the tasks module imports this one

    remove_from_search(document.knowledge_base, [document.pk], then=lambda ids: purge_documents.delay(ids))


def remove_from_search(
    kb: KnowledgeBase, document_ids: Sequence[int], *, then: Callable[[list[int]], object] | None = None
) -> int:
    """Deactivate documents of ``kb``: their chunks (rows, graph mentions) leave every version in one
    transaction and their keyword-index entries right after the commit; the documents stay ``removed``
    (no chunks) until purged. ``then`` gets the ids removed once that commits (robust: a failure there,
    say the broker down, leaves them to the hourly purge). Returns how many were removed (already
    removed ones are skipped)."""
    with transaction.atomic():
        documents = Document.objects.select_for_update().filter(knowledge_base=kb, pk__in=list(document_ids))
        ids = list(documents.exclude(status=Document.Status.REMOVED).values_list("pk", flat=True))
        held: dict[int, list[int]] = {}
        for version_id, document_id in Chunk.objects.filter(document_id__in=ids).order_by().values_list(
            "kb_version_id", "document_id"
        ).distinct():
            held.setdefault(version_id, []).append(document_id)
        for version_id, holding in held.items():
            _record_lexical_change(version_id, holding)
            chunk_ids = list(Chunk.objects.filter(kb_version_id=version_id, document_id__in=holding).values_list("id", flat=True))
            graph_store().replace_chunks(kb.tenant_id, version_id, chunk_ids, {})
        Chunk.objects.filter(document_id__in=ids).delete()
        Document.objects.filter(pk__in=ids).update(
            status=Document.Status.REMOVED, removed_at=timezone.now(), chunk_count=0, error="", updated_at=timezone.now()
        )
        _bump_revisions(list(held))
        if then is not None and ids:
            transaction.on_commit(lambda: then(ids), robust=True)
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
            transaction.on_commit(lambda name=name: storage.delete(name), robust=True)
    return len(purged)


def purge_documents_removed_before(grace_hours: int) -> int:
    """Purge documents removed more than ``grace_hours`` ago (beat runs it hourly): those gone from their
    source, and deleted ones whose own purge task was never sent."""
    cutoff = timezone.now() - timedelta(hours=grace_hours)
    old = Document.objects.filter(status=Document.Status.REMOVED, removed_at__lt=cutoff)
    return purge_document_rows(list(old.values_list("pk", flat=True)))


@transaction.atomic
def update_document_labels(
    document: Document, *, title: str | None = None, tags: list[str] | None = None, metadata: dict | None = None
) -> None:
    """Set a document's title, tags or metadata (None keeps one) and copy them onto every chunk of it,
    since filters read each chunk's copy; cached answers expire with the revision.

    A chunk's metadata is its own keys (such as a PDF's ``page``) under the document's, as ingestion
    writes it: the document's previous keys are replaced by the new ones, the chunk's own are kept (a
    key both had was the document's, so it goes with the document's previous keys)."""
    stored = Document.objects.select_for_update().get(pk=document.pk)
    previous_keys = list(stored.metadata)
    stored.title = stored.title if title is None else title
    stored.tags = stored.tags if tags is None else tags
    stored.metadata = stored.metadata if metadata is None else metadata
    with connection.cursor() as cursor:
        cursor.execute(_RELABEL_CHUNKS_SQL, [stored.tags, previous_keys, Jsonb(stored.metadata), stored.pk])
    stored.save(update_fields=["title", "tags", "metadata", "updated_at"])
    _bump_revisions(_versions_holding(stored))
    document.title, document.tags, document.metadata = stored.title, stored.tags, stored.metadata


# `jsonb - text[]` drops the document's previous keys, `||` puts the new ones over the chunk's own.
_RELABEL_CHUNKS_SQL = (
    f"UPDATE {Chunk._meta.db_table} SET tags = %s, metadata = (metadata - %s::text[]) || %s::jsonb "
    "WHERE document_id = %s"
)


def _versions_holding(document: Document) -> list[int]:
    """Ids of the KB versions that hold chunks of ``document``."""
    return list(document.chunks.order_by().values_list("kb_version_id", flat=True).distinct())


def _bump_revisions(version_ids: list[int]) -> None:
    KnowledgeBaseVersion.objects.filter(pk__in=version_ids).update(revision=F("revision") + 1)


def record_failure(kb: KnowledgeBase, source_uri: str, existing: Document | None, reason: str) -> Document:
    """Mark a file's document failed with a readable reason; a previously ingested version stays searchable."""
    if existing is not None and existing.chunk_count:
        reason = f"{reason} (the previously ingested version stays searchable)"
    path = Path(source_uri)
    document, _ = Document.objects.update_or_create(
        knowledge_base=kb,
        source_uri=source_uri,
        defaults={
            "tenant_id": kb.tenant_id,
            "doc_type": _doc_type_or_unknown(path),
            "title": existing.title if existing else path.stem,
            "status": Document.Status.FAILED,
            "error": reason,
        },
    )
    return document


def _unchanged(existing: Document | None, md5: str, labels: _Labels) -> bool:
    """Same bytes, same sidecar labels and the same chunker as the ready document: nothing to do."""
    return (
        existing is not None
        and existing.status == Document.Status.READY
        and existing.content_md5 == md5
        and existing.chunker_version == chunker_version(existing.doc_type)
        and existing.tags == labels.tags
        and existing.metadata == labels.metadata
        and (labels.title is None or existing.title == labels.title)
    )


def _doc_type_or_unknown(path: Path) -> str:
    try:
        return doc_type_for(path)
    except ParseError:
        return "unknown"


_COPY_COLUMNS = [
    ("document_id", "int8"),
    ("kb_version_id", "int8"),
    ("tenant_id", "int8"),
    ("knowledge_base_id", "int8"),
    ("ordinal", "int4"),
    ("content", "text"),
    ("content_hash", "varchar"),
    ("token_count", "int4"),
    ("embedding_dim", "int2"),
    ("embedding", "vector"),
    ("doc_type", "varchar"),
    ("created_at", "timestamptz"),
    ("tags", "varchar[]"),
    ("metadata", "jsonb"),
]


@dataclass
class ChunkBatch:
    """One document's chunks as COPY writes them."""

    document: Document
    drafts: list[ChunkDraft]
    vectors: Sequence
    labels: _Labels


def _copy_chunks(kb, version, batches: Iterable[ChunkBatch]) -> None:
    """Write documents' chunks with one binary COPY (~20x faster than ORM inserts)."""
    statement = sql.SQL("COPY {table} ({columns}) FROM STDIN WITH (FORMAT BINARY)").format(
        table=sql.Identifier(Chunk._meta.db_table),
        columns=sql.SQL(", ").join(sql.Identifier(name) for name, _ in _COPY_COLUMNS),
    )
    register_vector_type()
    with connection.cursor() as cursor:
        with cursor.cursor.copy(statement) as copy:
            copy.set_types([type_name for _, type_name in _COPY_COLUMNS])
            for batch in batches:
                doc, labels = batch.document, batch.labels
                for ordinal, (draft, vector) in enumerate(zip(batch.drafts, batch.vectors, strict=True)):
                    copy.write_row(
                        (
                            doc.pk,
                            version.pk,
                            kb.tenant_id,
                            kb.pk,
                            ordinal,
                            draft.text,
                            draft.content_hash,
                            draft.token_count,
                            len(vector),
                            vector,
                            doc.doc_type,
                            doc.created_at,  # filters on created_at mean the document's first ingestion
                            labels.tags,
                            Jsonb({**draft.metadata, **labels.metadata}),
                        )
                    )


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
            .values_list("id", "document_id", "document__context", "metadata__section", "content")
            .iterator(chunk_size=2000)
        )
        count = get_lexical_index().rebuild(
            version.pk,
            (
                LexicalDocument(
                    chunk_id, doc_id, tenant_id, analyzer.analyze(contextual_text(context, content, section))
                )
                for chunk_id, doc_id, context, section, content in rows
            ),
            analyzer_version=analyzer.version,
            dictionary_fingerprint=analyzer.dictionary_fingerprint,
        )
        PendingLexicalChange.objects.filter(pk__in=covered).delete()
        KnowledgeBaseVersion.objects.filter(pk=version.pk).update(
            analyzer_version=analyzer.version, revision=F("revision") + 1
        )
    return count


GRAPH_REBUILD_BATCH = 500  # passages re-extracted and written per transaction


def rebuild_graph(version: KnowledgeBaseVersion) -> int:
    """Re-extract the graph of every chunk of a version from the database with the current extractor
    (after ``EXTRACTOR_VERSION`` changed, or to repair it), in transactions of ``GRAPH_REBUILD_BATCH``
    chunks, then record the extractor on the version; returns the number of chunks. Its communities
    are the caller's next step (``knowledge.communities.rebuild_communities``).

    Typed relations come from the LLM at ingestion (``GRAPH_LLM_TRIPLES``): with it on, a rebuild
    would replace them by co-occurrence, so it refuses; build a new version instead."""
    if triple_extractor() is not None:
        raise VersionConflict(
            "GRAPH_LLM_TRIPLES is on: typed relations come from the LLM at ingestion; build a new version instead"
        )
    tenant_id = version.knowledge_base.tenant_id
    extractor = entity_extractor_for_tenant(tenant_id)
    rows = Chunk.objects.filter(kb_version=version, tenant_id=tenant_id).order_by("id").values_list("id", "content")
    chunks = rows.iterator(chunk_size=2000)
    count = 0
    while batch := list(islice(chunks, GRAPH_REBUILD_BATCH)):
        graphs = {chunk_id: extractor.extract(content) for chunk_id, content in batch}
        graph_store().replace_chunks(tenant_id, version.pk, list(graphs), graphs)
        count += len(graphs)
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(
        graph_extractor=current_graph_extractor(), revision=F("revision") + 1
    )
    return count


# --- keyword index and rows: the commit protocol ---------------------------------------------------
#
# A change to chunks records the documents it touched (PendingLexicalChange) in its own transaction;
# after the COMMIT their index entries are rewritten from the committed rows and the record is deleted.
# A rollback or a kill before the COMMIT leaves the index untouched; a kill after it leaves the record,
# which the next write to the version (or `check_kb --repair`) applies. Searches drop index entries
# whose chunk is gone, so the short lag after a kill never returns a missing chunk.

# pg_advisory_xact_lock(class, version id): one process at a time turns rows into index entries.
_LEXICAL_LOCK_CLASS = 15_001


def _lock_lexical_index(version_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LEXICAL_LOCK_CLASS, version_id & 0x7FFFFFFF])


def _record_lexical_change(version_id: int, document_ids: list[int]) -> None:
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
        columns = ("id", "document_id", "document__context", "metadata__section", "content")
        entries = [
            LexicalDocument(
                chunk_id,
                doc_id,
                tenant_id,
                analyzed.get(chunk_id) or analyzer.analyze(contextual_text(context, content, section)),
            )
            for chunk_id, doc_id, context, section, content in rows.values_list(*columns)
        ]
        get_lexical_index().replace_documents(
            version_id,
            document_ids,
            entries,
            analyzer_version=analyzer.version,
            dictionary_fingerprint=analyzer.dictionary_fingerprint,
        )
        pause_at("index_committed")
        PendingLexicalChange.objects.filter(pk__in=[pk for pk, _ in changes]).delete()
    return len(changes)


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


def _rows_and_entries(version: KnowledgeBaseVersion) -> tuple[set[int], Counter]:
    """The version's chunk ids in the database, and its keyword-index entries counted by chunk id."""
    in_db = set(Chunk.objects.filter(kb_version=version).values_list("id", flat=True))
    return in_db, Counter(get_lexical_index().chunk_ids(version.pk))


def pause_at(boundary: str) -> None:
    """Crash tests only: when ``CRASH_TEST_PAUSE_AT`` names this boundary, say so on stderr and wait
    to be killed (``rows_written``: before the COMMIT; ``rows_committed``: after it, before the index
    write; ``index_committed``: after the index write, before the pending change is cleared)."""
    if settings.CRASH_TEST_PAUSE_AT != boundary:
        return
    sys.stderr.write(f"paused at {boundary}\n")
    sys.stderr.flush()
    while True:
        signal.pause()
