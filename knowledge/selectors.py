"""Reads for knowledge bases."""
from __future__ import annotations

from knowledge.models import KnowledgeBase
from retrieval.exceptions import KnowledgeBaseNotFound
from tenants.models import Tenant


def searchable_knowledge_bases(tenant: Tenant, kb_ids: list[int] | None = None) -> list[KnowledgeBase]:
    """The tenant's KBs to search (all of them when ``kb_ids`` is empty), each with its active version.

    A KB id of another tenant is reported exactly like one that does not exist.
    """
    queryset = KnowledgeBase.objects.filter(tenant=tenant, active_version__isnull=False).select_related(
        "active_version"
    )
    if not kb_ids:
        return list(queryset)
    found = list(queryset.filter(pk__in=set(kb_ids)))
    missing = sorted(set(kb_ids) - {kb.pk for kb in found})
    if missing:
        raise KnowledgeBaseNotFound(
            f"unknown knowledge base id(s): {', '.join(map(str, missing))}", details={"kb_ids": missing}
        )
    return found
