"""Writes for knowledge bases: creation, ingestion of files, and the vector indexes they need."""
from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from psycopg import sql
from psycopg.types.json import Jsonb

from knowledge.chunking import CHUNKER_VERSION, ChunkDraft, chunk_sections, contextual_text, document_context
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseVersion
from knowledge.selectors import analyzer_for_tenant
from knowledge.stores import vector_index
from knowledge.parsing import SUPPORTED_SUFFIXES, ParseError, doc_type_for, parse_file
from engines.embedders import Embedder, EmbeddingError, get_embedder
from engines import get_lexical_index
from engines.pgvector_index import register_vector_type
from engines.base import LexicalDocument
from core.metrics import record_ingest
from tenants.models import Tenant

logger = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".meta.json"
# Chunks from several files are embedded together: the model sorts each call by length, so larger
# groups pad less (256 -> 1024 cut padded tokens 1.27 -> 1.24 per real token on SciFact; BENCHMARKS.md).
EMBED_FLUSH_CHUNKS = 1024


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
    embedder = get_embedder(embedding_model)
    size = min(chunk_size or settings.CHUNK_SIZE_TOKENS, embedder.max_tokens)
    kb = KnowledgeBase.objects.create(
        tenant=tenant,
        name=name,
        description=description,
        embedding_model=embedder.model_name,
        embedding_dim=embedder.dimension,
        chunk_size=size,
        chunk_overlap=min(settings.CHUNK_OVERLAP_TOKENS if chunk_overlap is None else chunk_overlap, size // 2),
        languages=list(embedder.languages) if languages is None else languages,
    )
    activate_first_version(kb)
    return kb


def activate_first_version(kb: KnowledgeBase) -> KnowledgeBaseVersion:
    """Version 1, empty and active, with the vector index its dimension needs."""
    version = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb,
        number=1,
        status=KnowledgeBaseVersion.Status.ACTIVE,
        embedding_model=kb.embedding_model,
        embedding_dim=kb.embedding_dim,
    )
    kb.active_version = version
    kb.save(update_fields=["active_version"])
    vector_index().ensure_index(kb.embedding_dim)
    return version


def delete_knowledge_base(kb: KnowledgeBase) -> None:
    """Remove a KB with its versions, documents and chunks, then each version's lexical index.

    The indexes go once the rows are gone for good (after the commit), so a rolled-back delete
    leaves a searchable KB; an index that fails to drop is logged, and nothing searches it again."""
    version_ids = list(kb.versions.values_list("pk", flat=True))
    with transaction.atomic():
        kb.delete()
        transaction.on_commit(lambda: _drop_lexical_indexes(version_ids), robust=True)


@transaction.atomic
def delete_tenant(tenant: Tenant) -> None:
    """Remove a tenant with everything it owns; its knowledge bases go through
    :func:`delete_knowledge_base`, so their lexical indexes go too (hence here, not in ``tenants``)."""
    for kb in tenant.knowledge_bases.all():
        delete_knowledge_base(kb)
    tenant.delete()


def _drop_lexical_indexes(version_ids: list[int]) -> None:
    for version_id in version_ids:
        get_lexical_index().drop(version_id)


def get_or_create_knowledge_base(*, tenant: Tenant, name: str, **options) -> tuple[KnowledgeBase, bool]:
    kb = KnowledgeBase.objects.filter(tenant=tenant, name=name).select_related("active_version").first()
    if kb is not None:
        return kb, False
    return create_knowledge_base(tenant=tenant, name=name, **options), True


# --- ingestion ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceFile:
    path: Path
    source_uri: str


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


@dataclass
class _Labels:
    """What a document's sidecar (``<file>.meta.json``) may set: title, tags and metadata."""

    title: str | None = None
    tags: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)


def _read_sidecar(path: Path) -> _Labels:
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    if not sidecar.exists():
        return _Labels()
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ParseError(f"metadata file {sidecar.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ParseError(f"metadata file {sidecar.name} must hold a JSON object")
    tags, metadata, title = data.get("tags", []), data.get("metadata", {}), data.get("title")
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ParseError(f"metadata file {sidecar.name}: 'tags' must be a list of strings")
    if not isinstance(metadata, dict):
        raise ParseError(f"metadata file {sidecar.name}: 'metadata' must be an object")
    if title is not None and not isinstance(title, str):
        raise ParseError(f"metadata file {sidecar.name}: 'title' must be a string")
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


class Ingester:
    """Ingests files into one KB's active version; each document's chunks are swapped atomically."""

    def __init__(self, kb: KnowledgeBase, *, on_progress: Callable[[int], None] | None = None):
        self.kb = kb
        self.version = kb.active_version
        self.report = IngestReport()
        self._on_progress = on_progress or (lambda done: None)
        self._pending: list[_PendingDocument] = []
        self._embedder: Embedder | None = None
        self.analyzer = analyzer_for_tenant(kb.tenant_id)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.kb.embedding_model)
        return self._embedder

    def ingest(self, files: list[SourceFile]) -> IngestReport:
        started = time.perf_counter()
        existing = {
            doc.source_uri: doc
            for doc in Document.objects.filter(knowledge_base=self.kb, source_uri__in=[f.source_uri for f in files])
        }
        for source in files:
            self._prepare(source, existing.get(source.source_uri))
            if sum(len(p.drafts) for p in self._pending) >= EMBED_FLUSH_CHUNKS:
                self._flush()
        self._flush()
        self.report.seconds = time.perf_counter() - started
        record_ingest(self.report.outcomes(), self.report.chunks)
        return self.report

    def _prepare(self, source: SourceFile, existing: Document | None) -> None:
        try:
            data = source.path.read_bytes()
            md5 = hashlib.md5(data).hexdigest()
            labels = _read_sidecar(source.path)
            if _unchanged(existing, md5, labels):
                self.report.unchanged += 1
                self._on_progress(1)
                return
            parsed = parse_file(source.path)
            title = (labels.title or parsed.title)[:500]
            context = document_context(title, source.path)
            # The context is read before every chunk: the chunk gets what is left of the model's window
            # (at least half of it; a longer title is cut by the model at the chunk's end instead).
            window = self.embedder.max_tokens
            budget = max(window - self.embedder.count_tokens(context), window // 2) if context else window
            drafts = chunk_sections(
                parsed.sections,
                count_tokens=self.embedder.count_tokens,
                chunk_size=min(self.kb.chunk_size, budget),
                chunk_overlap=self.kb.chunk_overlap,
                max_tokens=budget,
            )
        except (OSError, ParseError) as exc:
            self._fail(source, existing, str(exc))
            return
        if not drafts:
            self._fail(source, existing, "no text found")
            return
        analyzed = [self.analyzer.analyze(contextual_text(context, draft.text)) for draft in drafts]
        self._pending.append(
            _PendingDocument(source, existing, md5, title, context, parsed.doc_type, labels, drafts, analyzed)
        )

    def _fail(self, source: SourceFile, existing: Document | None, reason: str) -> None:
        """Record the failure; a previously ingested version of the file stays searchable."""
        if existing is not None and existing.chunk_count:
            reason = f"{reason} (the previously ingested version stays searchable)"
        Document.objects.update_or_create(
            knowledge_base=self.kb,
            source_uri=source.source_uri,
            defaults={
                "tenant_id": self.kb.tenant_id,
                "doc_type": _doc_type_or_unknown(source.path),
                "title": existing.title if existing else source.path.stem,
                "status": Document.Status.FAILED,
                "error": reason,
            },
        )
        self.report.failed += 1
        self.report.failures.append((source.source_uri, reason))
        self._on_progress(1)

    def _flush(self) -> None:
        """Embed the pending documents together, then swap their chunks (rows and lexical entries)
        in one transaction with a few statements for the whole group; a failure leaves every
        previous version in place."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        texts = [contextual_text(doc.context, draft.text) for doc in pending for draft in doc.drafts]
        try:
            vectors = self.embedder.embed_documents(texts)
        except EmbeddingError as exc:
            for doc in pending:
                self._fail(doc.source, doc.existing, f"embedding failed: {exc}")
            return
        with transaction.atomic():
            documents = self._upsert_documents(pending)
            Chunk.objects.filter(document__in=[document.pk for document in documents]).delete()
            batches, offset = [], 0
            for document, doc in zip(documents, pending, strict=True):
                batches.append(ChunkBatch(document, doc.drafts, vectors[offset : offset + len(doc.drafts)], doc.labels))
                offset += len(doc.drafts)
            _copy_chunks(self.kb, self.version, batches)
            self._index_lexically(documents, pending)
            bump_revision(self.version)
        for doc in pending:
            self.report.added += doc.existing is None
            self.report.replaced += doc.existing is not None
            self.report.chunks += len(doc.drafts)
            self._on_progress(1)

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
                chunker_version=CHUNKER_VERSION,
                status=Document.Status.READY,
                error="",
                tags=doc.labels.tags,
                metadata=doc.labels.metadata,
                chunk_count=len(doc.drafts),
            )
            for doc in pending
        ]
        documents = Document.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["knowledge_base", "source_uri"],
            update_fields=[
                "title", "context", "doc_type", "content_md5", "chunker_version", "status", "error", "tags", "metadata",
                "chunk_count", "updated_at",
            ],
        )  # fmt: skip
        for document, doc in zip(documents, pending, strict=True):
            if doc.existing is not None:  # the row kept its first ingestion time; so do its chunks
                document.created_at = doc.existing.created_at
        return documents

    def _index_lexically(self, documents: list[Document], pending: list[_PendingDocument]) -> None:
        analyzed = {
            (document.pk, ordinal): text
            for document, doc in zip(documents, pending, strict=True)
            for ordinal, text in enumerate(doc.analyzed)
        }
        rows = Chunk.objects.filter(document__in=documents).values_list("id", "document_id", "ordinal")
        get_lexical_index().replace_documents(
            self.version.pk,
            [document.pk for document in documents],
            [
                LexicalDocument(chunk_id=chunk_id, doc_id=doc_id, tenant_id=self.kb.tenant_id, text=analyzed[(doc_id, ordinal)])
                for chunk_id, doc_id, ordinal in rows
            ],
            analyzer_version=self.analyzer.version,
            dictionary_fingerprint=self.analyzer.dictionary_fingerprint,
        )


def bump_revision(version: KnowledgeBaseVersion) -> None:
    """Every content change gets a new revision, so caches and vocabularies keyed on it expire."""
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(revision=F("revision") + 1)


def expire_cached_answers(tenant_id: int) -> None:
    """After a change that alters how a tenant's queries are answered without touching its chunks
    (synonyms, protected terms): bump the revision of its KB versions, so no cached answer is reused."""
    KnowledgeBaseVersion.objects.filter(knowledge_base__tenant_id=tenant_id).update(revision=F("revision") + 1)


@transaction.atomic
def delete_document(document: Document) -> None:
    """Remove a document with its chunks from the database and the lexical index together."""
    version_ids = _versions_holding(document)
    for version_id in version_ids:
        get_lexical_index().delete_documents(version_id, [document.pk])
    document.delete()
    _bump_revisions(version_ids)


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


def _unchanged(existing: Document | None, md5: str, labels: _Labels) -> bool:
    """Same bytes, same sidecar labels and the same chunker as the ready document: nothing to do."""
    return (
        existing is not None
        and existing.status == Document.Status.READY
        and existing.content_md5 == md5
        and existing.chunker_version == CHUNKER_VERSION
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
    analyzer or dictionary change, or to repair the index); returns the number of chunks."""
    tenant_id = version.knowledge_base.tenant_id
    analyzer = analyzer_for_tenant(tenant_id)
    rows = (
        Chunk.objects.filter(kb_version=version, tenant_id=tenant_id)
        .values_list("id", "document_id", "document__context", "content")
        .iterator(chunk_size=2000)
    )
    count = get_lexical_index().rebuild(
        version.pk,
        (
            LexicalDocument(chunk_id, doc_id, tenant_id, analyzer.analyze(contextual_text(context, content)))
            for chunk_id, doc_id, context, content in rows
        ),
        analyzer_version=analyzer.version,
        dictionary_fingerprint=analyzer.dictionary_fingerprint,
    )
    KnowledgeBaseVersion.objects.filter(pk=version.pk).update(analyzer_version=analyzer.version, revision=F("revision") + 1)
    return count
