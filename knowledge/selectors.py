"""Reads for knowledge bases."""
from __future__ import annotations

from typing import TYPE_CHECKING

from knowledge.models import DictionaryTerm, KnowledgeBase
from retrieval.exceptions import KnowledgeBaseNotFound
from tenants.models import Tenant

if TYPE_CHECKING:
    from retrieval.analysis import Analyzer


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


def analyzer_for_tenant(tenant_id: int) -> "Analyzer":
    """The analyzer with the tenant's protected terms (one small query; analyzers are cached)."""
    from retrieval.analysis import DictionaryEntry, analyzer_for

    entries = DictionaryTerm.objects.filter(tenant_id=tenant_id).values_list("kind", "value")
    return analyzer_for(DictionaryEntry(kind=kind, value=value) for kind, value in entries)
