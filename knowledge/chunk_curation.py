"""Curators fix chunks: edit a chunk's text, disable or enable it, add one of their own.

Every change reaches every store before the call returns: the row is rewritten with a new embedding, the
keyword index follows right after the commit (``knowledge.lexical``), the graph forgets what the old text
mentioned and learns the new, and the version's revision is bumped, so no cached answer (result cache,
semantic cache) holding the old text is served again. A changed chunk keeps its id.

The change itself is kept as a ``ChunkEdit`` that re-ingestion applies again (``apply_chunk_edits``): to
the chunk cut with the same original text, so edits survive re-ingesting an unchanged file and go into a
version rebuild. When the file changed and no chunk has that text any more, the edit is not applied and
is flagged ``needs_review`` for the curator, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.db.models import Max

from engines.embedders import get_embedder
from knowledge.chunking import ChunkDraft, contextual_text
from knowledge.errors import ChunkNotFound, InvalidChunkEdit
from knowledge.graph_extraction import graph_extraction
from knowledge.lexical import apply_pending_lexical_changes, record_lexical_change
from knowledge.models import Chunk, ChunkEdit, Document, KnowledgeBaseVersion
from knowledge.parsing import clean_text
from knowledge.revisions import bump_revisions
from knowledge.stores import graph_store, refresh_vector_fields, vector_index

CURATED = "curated"  # the chunk metadata key naming the edit applied to it: {"edit": id, "manual": bool}


def edit_of(chunk: Chunk) -> int | None:
    """The id of the ``ChunkEdit`` applied to a chunk row, None for a chunk as ingestion cut it."""
    return ((chunk.metadata or {}).get(CURATED) or {}).get("edit")


def _clean(content: str) -> str:
    text = clean_text(content)
    if not text:
        raise InvalidChunkEdit("a chunk's content may not be blank")
    return text


def edit_chunk(
    document: Document, chunk_id: int, *, content: str | None = None, enabled: bool | None = None, editor: str = ""
) -> ChunkEdit:
    """Change the text of a chunk of the document's active version, or disable or enable it (a disabled
    chunk is listed by the id it had, and enabled again under it)."""
    if content is None and enabled is None:
        raise InvalidChunkEdit("send content, enabled, or both")
    version = _active_version(document)
    chunk = Chunk.objects.filter(document=document, kb_version=version, pk=chunk_id).first()
    if chunk is not None:
        edit_id = edit_of(chunk)
        edit = ChunkEdit.objects.filter(pk=edit_id, document=document).first() if edit_id else None
        if edit is None:
            edit = ChunkEdit(
                tenant_id=document.tenant_id, document=document, original_hash=chunk.content_hash,
                original_content=chunk.content, content=chunk.content,
            )  # fmt: skip
        edit.metadata = {key: value for key, value in chunk.metadata.items() if key != CURATED}
        edit.ordinal = chunk.ordinal
    else:
        edit = ChunkEdit.objects.filter(document=document, chunk_id=chunk_id, enabled=False).first()
        if edit is None:
            raise ChunkNotFound(f"document {document.pk} has no chunk {chunk_id}")
    if content is not None:
        edit.content = _clean(content)
    if enabled is not None:
        edit.enabled = enabled
    edit.edited_by = editor
    edit.needs_review = False
    edit.chunk_id = chunk_id
    _apply(document, version, edit, chunk)
    return edit


def add_chunk(document: Document, content: str, *, editor: str = "") -> ChunkEdit:
    """A chunk of the curator's own after the document's last one, read with the document's title."""
    version = _active_version(document)
    last = Chunk.objects.filter(document=document, kb_version=version).aggregate(last=Max("ordinal"))["last"]
    edit = ChunkEdit(
        tenant_id=document.tenant_id, document=document, manual=True, content=_clean(content), edited_by=editor,
        ordinal=0 if last is None else last + 1, metadata=dict(document.metadata),
    )  # fmt: skip
    _apply(document, version, edit, None)
    return edit


def _active_version(document: Document) -> KnowledgeBaseVersion:
    version = document.knowledge_base.active_version
    if version is None or document.status != Document.Status.READY:
        raise ChunkNotFound(f"document {document.pk} has no searchable chunks")
    return version


def _apply(document: Document, version: KnowledgeBaseVersion, edit: ChunkEdit, chunk: Chunk | None) -> None:
    """Replace ``chunk`` (if any) by the edit's text (if enabled) in the row, the graph and the keyword
    index, in one transaction; the embedding is computed before it."""
    metadata = dict(edit.metadata)
    vector = None
    if edit.enabled:
        embedder = get_embedder(version.embedding_model)
        section = metadata.get("section")
        (vector,) = embedder.embed_documents([contextual_text(document.context, edit.content, section)])
        token_count = embedder.count_tokens(edit.content)
        extractor = graph_extraction().entity_extractor(document.tenant_id, document.knowledge_base_id)
        extraction = extractor.extract(edit.content)
    with transaction.atomic():
        Document.objects.select_for_update().filter(pk=document.pk).first()  # one change of a document at a time
        edit.save()
        if chunk is not None:  # while the row exists: the graph forgets what only it mentioned
            graph_store().delete(document.tenant_id, version.pk, [chunk.pk])
            vector_index().delete(version.pk, [chunk.pk])
            chunk.delete()
        if vector is not None:  # the edit is enabled (embedded above)
            metadata[CURATED] = {"edit": edit.pk, "manual": edit.manual}
            row = Chunk(
                id=edit.chunk_id, document=document, kb_version=version, tenant_id=document.tenant_id,
                knowledge_base_id=document.knowledge_base_id, ordinal=edit.ordinal, content=edit.content,
                content_hash=ChunkDraft(edit.content, 0).content_hash, token_count=token_count,
                embedding_dim=len(vector), embedding=vector, doc_type=document.doc_type,
                created_at=document.created_at, tags=chunk.tags if chunk is not None else document.tags,
                metadata=metadata, parent_id=chunk.parent_id if chunk is not None else None,
                # the document's effective ACL, as ingestion writes it (docs/permissions.md): an edited or
                # added chunk is readable by exactly those who may read its document
                acl=list(document.acl or document.knowledge_base.default_acl),
            )  # fmt: skip
            row.save(force_insert=True)
            if edit.chunk_id is None:
                ChunkEdit.objects.filter(pk=edit.pk).update(chunk_id=row.pk)
                edit.chunk_id = row.pk
            graph_store().write(document.tenant_id, version.pk, {row.pk: extraction})
            refresh_vector_fields(Chunk.objects.filter(pk=row.pk))  # Milvus: the row's vector and fields
        record_lexical_change(version.pk, [document.pk])
        Document.objects.filter(pk=document.pk).update(
            chunk_count=Chunk.objects.filter(document=document, kb_version=version).count()
        )
        bump_revisions([version.pk])
    apply_pending_lexical_changes(version.pk)


def apply_chunk_edits(
    document: Document | None, drafts: list[ChunkDraft], count_tokens: Callable[[str], int]
) -> list[ChunkDraft]:
    """A re-ingested document's chunks with its curator's edits applied: an edited chunk (found by the
    text ingestion first cut) takes the curator's text, a disabled one is left out, added ones follow the
    file's. An edit whose original text is no longer cut (the file changed) is flagged ``needs_review``
    and not applied; one found again is unflagged."""
    if document is None or document.pk is None:
        return drafts
    edits = list(ChunkEdit.objects.filter(document=document))
    if not edits:
        return drafts
    by_hash = {edit.original_hash: edit for edit in edits if not edit.manual}
    kept: list[ChunkDraft] = []
    found: set[int] = set()
    for draft in drafts:
        edit = by_hash.get(draft.content_hash)
        if edit is None:
            kept.append(draft)
            continue
        found.add(edit.pk)
        if edit.enabled:
            metadata = {**draft.metadata, CURATED: {"edit": edit.pk, "manual": False}}
            kept.append(ChunkDraft(edit.content, count_tokens(edit.content), metadata, draft.parent))
    for edit in edits:
        if edit.manual and edit.enabled:
            metadata = {**edit.metadata, CURATED: {"edit": edit.pk, "manual": True}}
            kept.append(ChunkDraft(edit.content, count_tokens(edit.content), metadata))
    lost = [edit.pk for edit in edits if not edit.manual and edit.pk not in found]
    ChunkEdit.objects.filter(pk__in=lost).update(needs_review=True)
    ChunkEdit.objects.filter(pk__in=found).update(needs_review=False)
    return kept


def sync_edited_chunk_ids(document_ids: list[int], version: KnowledgeBaseVersion) -> None:
    """After re-ingestion rewrote the rows: each applied edit learns its chunk's new id."""
    for chunk_id, metadata in Chunk.objects.filter(
        document_id__in=document_ids, kb_version=version, metadata__has_key=CURATED
    ).values_list("id", "metadata"):
        ChunkEdit.objects.filter(pk=metadata[CURATED]["edit"]).update(chunk_id=chunk_id)
