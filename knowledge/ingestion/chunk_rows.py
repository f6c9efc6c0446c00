"""Documents' chunks as the vector index's rows (``engines.base.ChunkRow``), with their labels and ACLs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from django.db import connection

from engines.base import ChunkRow
from knowledge.chunking import ChunkDraft
from knowledge.ingestion.files import Labels
from knowledge.models import Document, KnowledgeBase, KnowledgeBaseVersion
from knowledge.stores import vector_index

_DEFAULT_ACL_SQL = f"SELECT default_acl FROM {KnowledgeBase._meta.db_table} WHERE id = %s FOR SHARE"


@dataclass
class ChunkBatch:
    """One document's chunks with their vectors, as the vector index takes them."""

    document: Document
    drafts: list[ChunkDraft]
    vectors: np.ndarray
    labels: Labels
    parent_ids: list[int] = field(
        default_factory=list
    )  # parent_child: the document's parent passages' ids, by parent index; else empty


def chunk_rows(kb: KnowledgeBase, version: KnowledgeBaseVersion, batches: Sequence[ChunkBatch]) -> Iterator[ChunkRow]:
    """The rows of documents' chunks in ``version``. Reads the KB's default ACL as committed first and
    holds it (FOR SHARE) until the caller's transaction ends: a change of it
    (knowledge.acls.set_default_acl) waits, then rewrites these rows too."""
    with connection.cursor() as cursor:
        cursor.execute(_DEFAULT_ACL_SQL, [kb.pk])
        (default_acl,) = cursor.fetchone()
    return _rows(kb, version, batches, default_acl)


def _rows(
    kb: KnowledgeBase, version: KnowledgeBaseVersion, batches: Sequence[ChunkBatch], default_acl: list[str]
) -> Iterator[ChunkRow]:
    for batch in batches:
        doc, labels = batch.document, batch.labels
        for ordinal, (draft, vector) in enumerate(zip(batch.drafts, batch.vectors, strict=True)):
            yield ChunkRow(
                document_id=doc.pk,
                version_id=version.pk,
                tenant_id=kb.tenant_id,
                knowledge_base_id=kb.pk,
                ordinal=ordinal,
                content=draft.text,
                content_hash=draft.content_hash,
                token_count=draft.token_count,
                embedding=vector,
                doc_type=doc.doc_type,
                created_at=doc.created_at,  # filters on created_at mean the document's first ingestion
                tags=labels.tags,
                metadata={**draft.metadata, **labels.metadata},
                # The document row's (locked or just written in this transaction), else the KB's.
                acl=doc.acl or default_acl,
                parent_id=None if draft.parent is None else batch.parent_ids[draft.parent],
            )


def write_chunks(kb: KnowledgeBase, version: KnowledgeBaseVersion, batches: Sequence[ChunkBatch]) -> None:
    """Documents' chunks into ``version`` through the vector index (pgvector: one binary COPY)."""
    vector_index().write(chunk_rows(kb, version, batches))
