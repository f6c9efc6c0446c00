"""Reads for knowledge bases."""
from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import connection
from django.db.models import Count

from core.usage import query_counts

from knowledge.models import Chunk, DictionaryTerm, Document, KnowledgeBase, KnowledgeBaseVersion, Synonym
from knowledge.errors import KnowledgeBaseNotFound
from tenants.models import Tenant

if TYPE_CHECKING:
    from engines.analysis import Analyzer
    from engines.graph_extraction import EntityExtractor


def searchable_knowledge_bases(tenant: Tenant, kb_ids: list[int] | None = None) -> list[KnowledgeBase]:
    """The tenant's KBs to search (all of them when ``kb_ids`` is empty), each with its active version.

    A KB id of another tenant is reported exactly like one that does not exist.
    """
    queryset = KnowledgeBase.objects.filter(tenant=tenant, active_version__isnull=False).select_related(
        "active_version"
    )
    if kb_ids:
        queryset = queryset.filter(pk__in=set(kb_ids))
    found = list(queryset)
    _check_found(kb_ids, {kb.pk for kb in found})
    return found


def searched_version_revisions(tenant: Tenant, kb_ids: list[int] | None = None) -> list[tuple[int, int]]:
    """(active version id, revision) of each KB a search would cover, sorted: what a cached answer
    depends on. Same scope and errors as :func:`searchable_knowledge_bases`, a fraction of its cost."""
    # Raw SQL: this runs on every cached answer, where compiling the ORM query cost more than running it.
    with connection.cursor() as cursor:
        ids = sorted(set(kb_ids)) if kb_ids else None
        cursor.execute(_SEARCHED_VERSIONS_SQL, [tenant.pk, ids, ids])
        rows = cursor.fetchall()
    _check_found(kb_ids, {kb_id for kb_id, _, _ in rows})
    return sorted((version_id, revision) for _, version_id, revision in rows)


_SEARCHED_VERSIONS_SQL = (
    f"SELECT kb.id, v.id, v.revision FROM {KnowledgeBase._meta.db_table} kb "
    f"JOIN {KnowledgeBaseVersion._meta.db_table} v ON v.id = kb.active_version_id "
    "WHERE kb.tenant_id = %s AND (%s::bigint[] IS NULL OR kb.id = ANY(%s::bigint[]))"
)


def _check_found(kb_ids: list[int] | None, found: set[int]) -> None:
    missing = sorted(set(kb_ids or ()) - found)
    if missing:
        raise KnowledgeBaseNotFound(
            f"unknown knowledge base id(s): {', '.join(map(str, missing))}", details={"kb_ids": missing}
        )


def analyzer_for_tenant(tenant_id: int) -> "Analyzer":
    """The analyzer with the tenant's protected terms (one small query; analyzers are cached)."""
    from engines.analysis import DictionaryEntry, analyzer_for

    entries = DictionaryTerm.objects.filter(tenant_id=tenant_id).values_list("kind", "value")
    return analyzer_for(DictionaryEntry(kind=kind, value=value) for kind, value in entries)


def entity_extractor_for_tenant(tenant_id: int) -> "EntityExtractor":
    """Graph extraction with the tenant's protected terms; each two-way synonym group is one entity,
    named by its first term (the others are its aliases)."""
    from engines.analysis import normalize
    from engines.graph_extraction import EntityExtractor

    aliases: dict[str, str] = {}
    groups = Synonym.objects.filter(tenant_id=tenant_id, kind=Synonym.Kind.EQUIVALENT, is_active=True)
    for terms in groups.order_by("id").values_list("terms", flat=True):
        names = [normalize(term) for term in terms]
        for alias in names[1:]:
            aliases.setdefault(alias, names[0])
    return EntityExtractor(analyzer_for_tenant(tenant_id), aliases)


def tenant_stats(tenant: Tenant) -> dict:
    """What the tenant holds and how many queries it was served (``GET /api/v1/stats``)."""
    by_status = dict(Document.objects.filter(tenant=tenant).order_by().values_list("status").annotate(Count("id")))
    active_versions = KnowledgeBase.objects.filter(tenant=tenant).values("active_version")
    return {
        "tenant": tenant.name,
        "knowledge_bases": KnowledgeBase.objects.filter(tenant=tenant).count(),
        "documents": {
            "total": sum(by_status.values()),
            "by_status": {status: by_status.get(status, 0) for status in Document.Status.values},
        },
        "chunks": Chunk.objects.filter(tenant=tenant, kb_version__in=active_versions).count(),
        "queries": query_counts(tenant.pk),
    }
