"""A document's chunks as a curator sees them: in order, the edited, disabled and added ones marked, and
the edits a changed file left for review."""

from __future__ import annotations

from typing import Any

from knowledge.chunk_curation import CURATED, edit_of
from knowledge.models import Chunk, ChunkEdit, Document


def _entry(
    chunk_id: int | None, ordinal: int, content: str, enabled: bool, edit: ChunkEdit | None, **extra: object
) -> dict[str, Any]:
    return {
        "id": chunk_id,
        "ordinal": ordinal,
        "content": content,
        "enabled": enabled,
        "manual": bool(edit and edit.manual),
        "edited": edit is not None,
        "original_content": edit.original_content if edit is not None and not edit.manual else None,
        "needs_review": bool(edit and edit.needs_review),
        "edited_by": edit.edited_by if edit is not None else "",
        "edited_at": edit.edited_at if edit is not None else None,
        **extra,
    }


def document_chunks(document: Document) -> dict[str, list[dict[str, Any]]]:
    """``chunks``: the active version's chunks and the disabled ones, by ordinal; ``needs_review``: the
    edits not applied because the file changed (their original text is no longer cut)."""
    version = document.knowledge_base.active_version
    edits = {edit.pk: edit for edit in ChunkEdit.objects.filter(document=document)}
    chunks = [
        _entry(
            chunk.pk,
            chunk.ordinal,
            chunk.content,
            True,
            edits.get(edit_of(chunk) or 0),
            token_count=chunk.token_count,
            metadata={key: value for key, value in chunk.metadata.items() if key != CURATED},
        )  # fmt: skip
        for chunk in Chunk.objects.filter(document=document, kb_version=version).order_by("ordinal", "id")
    ]
    chunks += [
        _entry(edit.chunk_id, edit.ordinal, edit.content, False, edit, token_count=None, metadata=edit.metadata)
        for edit in edits.values()
        if not edit.enabled and not edit.needs_review
    ]
    chunks.sort(key=lambda entry: (entry["ordinal"], entry["id"] or 0))
    review = [
        _entry(edit.chunk_id, edit.ordinal, edit.content, edit.enabled, edit, token_count=None, metadata=edit.metadata)
        for edit in sorted(edits.values(), key=lambda edit: edit.ordinal)
        if edit.needs_review
    ]
    return {"chunks": chunks, "needs_review": review}
