"""Writes of who may read what (issue 48, docs/permissions.md): a document's ACL and its KB's default.

An ACL change is a write like a relabel: every chunk row of the document, in every version that holds
it (active, building, retired), gets the new effective ACL in the same transaction, and the versions'
revisions move, so the next search (and no cached answer) applies it; a rebuild and a re-ingestion
read it from the document row, and a rollback finds its rows already changed.
"""

from __future__ import annotations

import functools

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from knowledge.lexical import apply_pending_lexical_changes, record_lexical_change
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeSource
from knowledge.revisions import bump_revisions
from knowledge.stores import refresh_vector_fields
from tenants.principals import clean_principals


def set_document_acl(document: Document, acl: list[str]) -> None:
    """Set a document's ACL (empty: its KB's default) and apply it to its chunks at once."""
    acl = clean_principals(acl, where="acl")
    _set_documents_acl(document.knowledge_base_id, [document.pk], acl)
    document.acl = acl


def set_source_acl(source: KnowledgeSource, acl: list[str]) -> None:
    """Set a source's ACL (empty: the KB's default). A URL source's documents take it at once; a folder
    source's at its next sync, where a folder ACL file or a sidecar may win over it for some files."""
    acl = clean_principals(acl, where="acl")
    with transaction.atomic():
        KnowledgeSource.objects.filter(pk=source.pk).update(acl=acl)
        if source.kind == KnowledgeSource.Kind.URLS:
            ids = list(source.documents.values_list("pk", flat=True))
            _set_documents_acl(source.knowledge_base_id, ids, acl)
    source.acl = acl


def _set_documents_acl(kb_id: int, document_ids: list[int], acl: list[str]) -> None:
    with transaction.atomic():
        locked = list(Document.objects.select_for_update().filter(pk__in=document_ids).values_list("pk", flat=True))
        (default_acl,) = KnowledgeBase.objects.filter(pk=kb_id).values_list("default_acl", flat=True)
        Document.objects.filter(pk__in=locked).update(acl=acl, updated_at=timezone.now())
        bump_revisions(_apply(Q(document_id__in=locked), acl or default_acl))


def set_default_acl(kb: KnowledgeBase, acl: list[str]) -> None:
    """Set a KB's default ACL (at least one principal; ``["*"]``: everyone) and apply it to the chunks
    of its documents that set none."""
    acl = clean_principals(acl, where="default_acl", allow_empty=False)
    with transaction.atomic():
        KnowledgeBase.objects.select_for_update().filter(pk=kb.pk).update(default_acl=acl)
        inheriting = Document.objects.filter(knowledge_base_id=kb.pk, acl=[]).values("pk")
        versions = _apply(Q(knowledge_base_id=kb.pk, document_id__in=inheriting), acl)
        bump_revisions(versions)
    kb.default_acl = acl


def _apply(chunks: Q, acl: list[str]) -> list[int]:
    """Write ``acl`` onto the chunks ``chunks`` selects, and onto their keyword-index entries (which carry
    it as filter terms) once that commits; returns the ids of the versions that hold any."""
    selected = Chunk.objects.filter(chunks)
    held: dict[int, set[int]] = {}
    for version_id, document_id in selected.order_by().values_list("kb_version_id", "document_id").distinct():
        held.setdefault(version_id, set()).add(document_id)
    selected.update(acl=acl)  # rows of every version: a rollback finds them changed too
    refresh_vector_fields(selected)  # Milvus keeps the ACL beside the vectors
    for version_id, document_ids in held.items():
        record_lexical_change(version_id, sorted(document_ids))
        # After the outermost commit; a failure there leaves the change pending for the next writer or
        # ``check_kb --repair`` (the rows decide meanwhile: every keyword hit is checked against them).
        transaction.on_commit(functools.partial(apply_pending_lexical_changes, version_id), robust=True)
    return list(held)
