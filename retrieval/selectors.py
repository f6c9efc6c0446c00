"""The search's reads of the chunk table, always scoped to the tenant where the ids come from an index."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import F, TextField
from django.db.models.functions import MD5, Cast

from engines.database import read_connection
from knowledge.chunking import contextual_text
from knowledge.models import Chunk, KnowledgeBase, ParentChunk
from retrieval.filters import CompiledFilter
from retrieval.models import RetrievalRun
from tenants.models import Tenant


def content_hashes(chunk_ids: set[int]) -> dict[int, str]:
    """Chunk id -> content hash; a chunk missing from the result was deleted by a concurrent
    re-ingest after an index returned it."""
    if not chunk_ids:
        return {}
    return _id_hash_rows(f"SELECT id, content_hash FROM {_CHUNKS} WHERE id = ANY(%s)", [list(chunk_ids)])


def chunk_versions(tenant: Tenant, chunk_ids: set[int]) -> dict[int, int]:
    """Chunk id -> its KB version's id; a chunk missing from the result was deleted since."""
    return dict(Chunk.objects.filter(tenant=tenant, pk__in=list(chunk_ids)).values_list("id", "kb_version_id"))


def filtered_chunk_ids(
    tenant: Tenant, version_ids: tuple[int, ...], compiled: CompiledFilter, limit: int
) -> list[int] | None:
    """The ids of the chunks in these versions that pass the filters, or None when more than ``limit`` do."""
    scoped = compiled.apply(Chunk.objects.filter(tenant=tenant, kb_version_id__in=version_ids))
    ids = list(scoped.values_list("id", flat=True)[: limit + 1])
    return ids if len(ids) <= limit else None


def hashes_of_chunks_passing(tenant: Tenant, chunk_ids: list[int], compiled: CompiledFilter) -> dict[int, str]:
    """Chunk id -> content hash of those of ``chunk_ids`` that exist and pass the filters (the hashes
    come along so fusion's dedup need not read the same rows again)."""
    if not chunk_ids:
        return {}
    statement = f"SELECT id, content_hash FROM {_CHUNKS} WHERE tenant_id = %s AND id = ANY(%s)"
    params = [tenant.pk, list(chunk_ids)]
    if compiled.sql:
        statement += f" AND ({compiled.sql.sql})"
        params += compiled.sql.params
    return _id_hash_rows(statement, params)


def _id_hash_rows(statement: str, params: list[Any]) -> dict[int, str]:
    # Raw SQL (parameterized): on every search's hot path compiling the ORM query for a hundred ids
    # cost more than running it.
    with read_connection().cursor() as cursor:  # a search's reads: maybe a replica's
        cursor.execute(statement, params)
        return dict(cursor.fetchall())


_CHUNKS = connection.ops.quote_name(Chunk._meta.db_table)


def document_ids(tenant: Tenant, chunk_ids: list[int]) -> dict[int, int]:
    """Chunk id -> its document's id (``retrieval.grouping``)."""
    return dict(Chunk.objects.filter(tenant=tenant, pk__in=chunk_ids).values_list("id", "document_id"))


def passages(tenant: Tenant, chunk_ids: list[int]) -> dict[int, tuple[str, int]]:
    """Chunk id -> (content, ordinal): what a grouped hit shows of its document's other chunks (not
    the whole rows: reading their vectors would cost more than the rest of the answer)."""
    if not chunk_ids:
        return {}
    rows = Chunk.objects.filter(tenant=tenant, pk__in=chunk_ids).values_list("id", "content", "ordinal")
    return {chunk_id: (content, ordinal) for chunk_id, content, ordinal in rows}


def parents_of_chunks(tenant: Tenant, chunk_ids: set[int]) -> list[tuple[int, int, str, int]]:
    """(chunk id, parent id, parent content hash, chunk ordinal) of those of ``chunk_ids`` that are
    children of a parent passage (``parent_child`` versions)."""
    if not chunk_ids:
        return []
    with read_connection().cursor() as cursor:  # a search's reads: maybe a replica's
        cursor.execute(_PARENTS_OF_CHUNKS_SQL, [tenant.pk, list(chunk_ids)])
        rows: list[tuple[int, int, str, int]] = cursor.fetchall()
        return rows


_PARENTS_OF_CHUNKS_SQL = (
    f"SELECT c.id, p.id, p.content_hash, c.ordinal FROM {_CHUNKS} c "
    f"JOIN {connection.ops.quote_name(ParentChunk._meta.db_table)} p ON p.id = c.parent_id "
    "WHERE c.tenant_id = %s AND c.id = ANY(%s)"
)


def chunk_contents(tenant: Tenant, chunk_ids: list[int]) -> dict[int, str]:
    return dict(Chunk.objects.filter(tenant=tenant, pk__in=chunk_ids).values_list("id", "content"))


def indexed_texts(tenant: Tenant, chunk_ids: list[int]) -> dict[int, str]:
    """Chunk id -> the text its keyword-index entry was analyzed from (its document's context and heading
    path, then its content): what RM3 feedback reads of the first pass's top passages."""
    rows = Chunk.objects.filter(tenant=tenant, pk__in=chunk_ids).values_list(
        "id", "document__context", "metadata__section", "content"
    )
    return {chunk_id: contextual_text(context, content, section) for chunk_id, context, section, content in rows}


# What a hit shows of its chunk and document (``retrieval.services.hydrate``): no vector (parsing 384 floats
# per row from text was most of hydration's CPU), no timestamps or document columns a hit does not show
# (building the rows' model instances is most of what is left).
_HIT_FIELDS = (
    "document_id", "knowledge_base_id", "kb_version_id", "parent_id", "content", "doc_type", "metadata", "tags",
    "ordinal", "document__title", "document__source_uri",
)  # fmt: skip


def chunks_with_documents(tenant: Tenant, chunk_ids: list[int], *, parents: bool = False) -> dict[int, Chunk]:
    """The chunks to show as hits, with their documents (and ``parents``: their parent passages' content,
    in the same round trip), their ``_HIT_FIELDS`` only; a missing id was replaced by a re-ingest."""
    related, fields = (
        (("document", "parent"), (*_HIT_FIELDS, "parent__content")) if parents else (("document",), _HIT_FIELDS)
    )
    chunks = Chunk.objects.filter(tenant=tenant, pk__in=chunk_ids).select_related(*related).only(*fields)
    return {chunk.pk: chunk for chunk in chunks}


def recent_runs(user: User, limit: int = 20) -> list[RetrievalRun]:
    """The user's latest retrieval tests in the console, newest first."""
    return list(RetrievalRun.objects.filter(user=user).select_related("tenant")[:limit])


def embedding_sample(version_id: int, size: int) -> np.ndarray:
    """Up to ``size`` chunk vectors of a version, spread over the version by a hash of the chunk ids
    (the same sample every time for the same chunks)."""
    vectors = list(
        Chunk.objects.filter(kb_version_id=version_id)
        .annotate(spread=MD5(Cast("id", TextField())))
        .order_by("spread")
        .values_list("embedding", flat=True)[:size]
    )
    if not vectors:
        return np.empty((0, 0), dtype=np.float32)
    return np.stack([np.asarray(vector, dtype=np.float32) for vector in vectors])


PASSAGE_NEIGHBOURS = 1  # chunks shown on each side of a passage (``passage_with_context``)


def passage_with_context(
    tenant: Tenant,
    chunk_id: int,
    neighbours: int = PASSAGE_NEIGHBOURS,
    *,
    reachable: Collection[int] | None = None,
    reader: tuple[str, ...] | None = None,
) -> dict[str, Any] | None:
    """A chunk of one of the tenant's KBs' active versions, with its document, its parent passage (a
    parent_child version) and the chunks before and after it in its document. None: no such passage here
    (another tenant's chunk, one of a version no longer searched, one outside the key's ``reachable``
    KBs or one whose ACL does not admit ``reader``: each answers the same). Neighbours and parent are of
    the same document, so they share its ACL."""
    chunks = Chunk.objects.filter(tenant=tenant, pk=chunk_id, kb_version_id=F("knowledge_base__active_version_id"))
    if reachable is not None:
        chunks = chunks.filter(knowledge_base_id__in=list(reachable))
    if reader is not None:
        chunks = chunks.filter(acl__overlap=list(reader))
    chunk = chunks.select_related("document", "parent").first()
    if chunk is None:
        return None
    around = Chunk.objects.filter(
        tenant=tenant,
        document_id=chunk.document_id,
        kb_version_id=chunk.kb_version_id,
        ordinal__gte=max(chunk.ordinal - neighbours, 0),
        ordinal__lte=chunk.ordinal + neighbours,
    ).exclude(pk=chunk.pk)
    parent = chunk.parent
    return {
        **_passage(chunk),
        "title": chunk.document.title,
        "source_uri": chunk.document.source_uri,
        "doc_type": chunk.doc_type,
        "tags": list(chunk.tags),
        "parent": None if parent is None else {"id": parent.pk, "ordinal": parent.ordinal, "content": parent.content},
        "previous": [_passage(c) for c in sorted(around, key=lambda c: c.ordinal) if c.ordinal < chunk.ordinal],
        "next": [_passage(c) for c in sorted(around, key=lambda c: c.ordinal) if c.ordinal > chunk.ordinal],
    }


def _passage(chunk: Chunk) -> dict[str, Any]:
    metadata = chunk.metadata or {}
    return {
        "chunk_id": chunk.pk,
        "doc_id": chunk.document_id,
        "kb_id": chunk.knowledge_base_id,
        "ordinal": chunk.ordinal,
        "content": chunk.content,
        "section": metadata.get("section"),
        "page": metadata.get("page"),
        "metadata": metadata,
    }


def default_score_threshold(tenant: Tenant, kb_id: int) -> float:
    """The KB's default ``score_threshold`` (``search_settings``, set from an evaluation run's
    recommendation), 0.0 when it sets none or is not the tenant's (the search then answers that)."""
    settings = KnowledgeBase.objects.filter(tenant=tenant, pk=kb_id).values_list("search_settings", flat=True).first()
    value = (settings or {}).get("score_threshold")
    return float(value) if isinstance(value, int | float) else 0.0
