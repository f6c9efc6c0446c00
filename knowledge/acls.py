"""Writes of who may read what (issue 48, docs/permissions.md): a document's ACL and its KB's default.

An ACL change is a write like a relabel: every chunk row of the document, in every version that holds
it (active, building, retired), gets the new effective ACL in the same transaction, and the versions'
revisions move, so the next search (and no cached answer) applies it; a rebuild and a re-ingestion
read it from the document row, and a rollback finds its rows already changed.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from knowledge.models import Chunk, Document, KnowledgeBase
from knowledge.revisions import bump_revisions
from tenants.principals import clean_principals


def set_document_acl(document: Document, acl: list[str]) -> None:
    """Set a document's ACL (empty: its KB's default) and apply it to its chunks at once."""
    acl = clean_principals(acl, where="acl")
    with transaction.atomic():
        stored = Document.objects.select_for_update().get(pk=document.pk)
        kb = KnowledgeBase.objects.get(pk=stored.knowledge_base_id)
        Document.objects.filter(pk=stored.pk).update(acl=acl, updated_at=timezone.now())
        versions = _apply(Q(document_id=stored.pk), acl or kb.default_acl)
        bump_revisions(versions)
    document.acl = acl


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
    """Write ``acl`` onto the chunks ``chunks`` selects; returns the ids of the versions that hold any."""
    selected = Chunk.objects.filter(chunks)
    versions = list(selected.order_by().values_list("kb_version_id", flat=True).distinct())
    selected.update(acl=acl)  # rows of every version: a rollback finds them changed too
    return versions
