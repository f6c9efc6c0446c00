"""Chunk rows written with one binary COPY, PostgreSQL's fastest way in (ORM inserts are many times slower)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from django.db import connection
from psycopg import sql
from psycopg.types.json import Jsonb

from engines.pgvector_index import register_vector_type
from knowledge.chunking import ChunkDraft
from knowledge.ingestion.files import Labels
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseVersion

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
    ("acl", "varchar[]"),
    ("parent_id", "int8"),
]


_DEFAULT_ACL_SQL = f"SELECT default_acl FROM {KnowledgeBase._meta.db_table} WHERE id = %s FOR SHARE"


@dataclass
class ChunkBatch:
    """One document's chunks as COPY writes them."""

    document: Document
    drafts: list[ChunkDraft]
    vectors: np.ndarray
    labels: Labels
    parent_ids: list[int] = field(
        default_factory=list
    )  # parent_child: the document's parent passages' ids, by parent index; else empty


def copy_chunks(kb: KnowledgeBase, version: KnowledgeBaseVersion, batches: Iterable[ChunkBatch]) -> None:
    """Write documents' chunks into ``version`` with one binary COPY."""
    statement = sql.SQL("COPY {table} ({columns}) FROM STDIN WITH (FORMAT BINARY)").format(
        table=sql.Identifier(Chunk._meta.db_table),
        columns=sql.SQL(", ").join(sql.Identifier(name) for name, _ in _COPY_COLUMNS),
    )
    register_vector_type()
    with connection.cursor() as cursor:
        # The KB's default ACL as committed, held (FOR SHARE) until this transaction ends: a change of it
        # (knowledge.acls.set_default_acl) waits, then rewrites these rows too.
        cursor.execute(_DEFAULT_ACL_SQL, [kb.pk])
        (default_acl,) = cursor.fetchone()
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
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
                        # The document row's (locked or just written in this transaction), else the KB's.
                        doc.acl or default_acl,
                        None if draft.parent is None else batch.parent_ids[draft.parent],
                    )
                )
