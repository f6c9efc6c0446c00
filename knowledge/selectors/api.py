"""The reads behind the API's resources (knowledge bases, documents, sources, versions, tasks, stats),
which the console, the MCP tools and the maintenance commands share."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from celery.result import AsyncResult
from django.db.models import Count, Q, QuerySet

from core.cost import tenant_costs
from core.usage import query_counts
from knowledge.errors import DocumentNotFound, KnowledgeBaseNotFound, SourceNotFound, TaskNotFound, VersionNotFound
from knowledge.models import (
    Chunk,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    KnowledgeSource,
    KnowledgeTask,
    SourceRun,
)
from knowledge.search_settings import merged_search_settings
from tenants.models import Tenant


def search_settings_of(kb: KnowledgeBase) -> dict[str, Any]:
    """The KB's search settings with its active version's over them, key by key."""
    return merged_search_settings(kb.search_settings, kb.require_active_version().search_settings)


def knowledge_bases_of(
    tenant: Tenant, reachable: Collection[int] | None = None, reader: tuple[str, ...] | None = None
) -> QuerySet[KnowledgeBase]:
    """The tenant's KBs with their active version and document count (``GET /api/v1/knowledge-bases``);
    ``reachable``: a KB-limited key's (None: all); ``reader``: count only the documents it may read."""
    kbs = KnowledgeBase.objects.filter(tenant=tenant)
    if reachable is not None:
        kbs = kbs.filter(pk__in=list(reachable))
    counted = None if reader is None else readable_by(reader, prefix="documents__")
    return (
        kbs.select_related("active_version")
        .annotate(document_count=Count("documents", filter=counted))
        .order_by("name")
    )


def knowledge_base_of(
    tenant: Tenant, kb_id: int, reachable: Collection[int] | None = None, reader: tuple[str, ...] | None = None
) -> KnowledgeBase:
    """One of the tenant's KBs; another tenant's, or one outside ``reachable``, is reported exactly like
    one that does not exist."""
    kb = knowledge_bases_of(tenant, reachable, reader).filter(pk=kb_id).first()
    if kb is None:
        raise KnowledgeBaseNotFound(f"unknown knowledge base id: {kb_id}", details={"kb_ids": [kb_id]})
    return kb


def document_counts_by_status(kb_ids: list[int]) -> dict[int, dict[str, int]]:
    """KB id -> document status -> how many (the OpenAI-compatible vector stores' ``file_counts``)."""
    rows = (
        Document.objects.filter(knowledge_base_id__in=kb_ids)
        .order_by()
        .values("knowledge_base_id", "status")
        .annotate(n=Count("id"))
    )
    counts: dict[int, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row["knowledge_base_id"], {})[row["status"]] = row["n"]
    return counts


def readable_by(reader: tuple[str, ...], prefix: str = "") -> Q:
    """Documents ``reader`` may read: their ACL shares one of its principals, or they set none and their
    KB's default does (docs/permissions.md)."""
    return Q(**{f"{prefix}acl__overlap": list(reader)}) | Q(
        **{f"{prefix}acl": [], f"{prefix}knowledge_base__default_acl__overlap": list(reader)}
    )


def documents_of(kb: KnowledgeBase, reader: tuple[str, ...] | None = None) -> QuerySet[Document]:
    """The KB's documents; with a ``reader``, only those it may read (the others are as absent)."""
    documents = Document.objects.filter(knowledge_base=kb, tenant_id=kb.tenant_id)
    if reader is not None:
        documents = documents.filter(readable_by(reader))
    return documents.order_by("source_uri", "id")


def document_of(kb: KnowledgeBase, document_id: int, reader: tuple[str, ...] | None = None) -> Document:
    document = documents_of(kb, reader).filter(pk=document_id).first()
    if document is None:
        raise DocumentNotFound(f"knowledge base {kb.pk} has no document {document_id}")
    return document


def document_of_tenant(
    tenant: Tenant,
    document_id: int,
    reachable: Collection[int] | None = None,
    reader: tuple[str, ...] | None = None,
) -> Document:
    """A tenant's document by id alone (in any of its KBs); another tenant's, a removed one, one outside
    ``reachable`` KBs or one ``reader`` may not read is missing."""
    documents = Document.objects.filter(tenant=tenant, pk=document_id).exclude(status=Document.Status.REMOVED)
    if reachable is not None:
        documents = documents.filter(knowledge_base_id__in=list(reachable))
    if reader is not None:
        documents = documents.filter(readable_by(reader))
    document = documents.first()
    if document is None:
        raise DocumentNotFound(f"no document {document_id}")
    return document


RUNS_SHOWN = 5


def active_knowledge_bases(*, name: str | None = None, tenant_name: str | None = None) -> QuerySet[KnowledgeBase]:
    """The KBs with an active version, of one name and / or one tenant when given: what the maintenance
    commands (``rebuild_lexical_index``, ``graph_communities``) work on."""
    kbs = KnowledgeBase.objects.filter(active_version__isnull=False).select_related("active_version", "tenant")
    if name:
        kbs = kbs.filter(name=name)
    if tenant_name:
        kbs = kbs.filter(tenant__name=tenant_name)
    return kbs


def sources_of(kb: KnowledgeBase) -> QuerySet[KnowledgeSource]:
    """A KB's sources with their schedule."""
    return sources_with_schedule(KnowledgeSource.objects.filter(knowledge_base=kb))


def sources_with_schedule(sources: QuerySet[KnowledgeSource]) -> QuerySet[KnowledgeSource]:
    """Sources with their schedule and document count read in the same query, oldest first."""
    return (
        sources.select_related("periodic_task__interval", "periodic_task__crontab")
        .annotate(document_count=Count("documents"))
        .order_by("id")
    )


def latest_runs(source: KnowledgeSource, count: int = RUNS_SHOWN) -> list[SourceRun]:
    return list(source.runs.order_by("-started_at", "-id")[:count])


def source_of(kb: KnowledgeBase, source_id: int) -> KnowledgeSource:
    source = sources_of(kb).filter(pk=source_id).first()
    if source is None:
        raise SourceNotFound(f"knowledge base {kb.pk} has no source {source_id}")
    return source


def source_schedule(source: KnowledgeSource) -> dict[str, Any]:
    """``{"interval_seconds": n}`` or ``{"crontab": "m h dom mon dow"}``, as the API takes it."""
    task = source.periodic_task
    if task is None:
        return {}
    if task.crontab is not None:
        cron = task.crontab
        return {"crontab": " ".join([cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week])}
    return {"interval_seconds": task.interval.every}


def versions_of(kb: KnowledgeBase, reader: tuple[str, ...] | None = None) -> list[KnowledgeBaseVersion]:
    """A KB's versions, newest first, each with the documents and chunks it holds (counted now; with a
    ``reader``, only those it may read)."""
    versions = KnowledgeBaseVersion.objects.filter(knowledge_base=kb).order_by("-number")
    return [_count_contents(version, reader) for version in versions]


def version_of(kb: KnowledgeBase, number: int, *, counted: bool = True) -> KnowledgeBaseVersion:
    """A KB's version by number, with what it holds counted (a pass over its chunks) unless not ``counted``."""
    version = KnowledgeBaseVersion.objects.filter(knowledge_base=kb, number=number).first()
    if version is None:
        raise VersionNotFound(f"knowledge base {kb.pk} has no version {number}")
    return _count_contents(version) if counted else version


def _count_contents(version: KnowledgeBaseVersion, reader: tuple[str, ...] | None = None) -> KnowledgeBaseVersion:
    """Set ``chunk_count`` and ``document_count``: one aggregate over the version's own rows, its id a
    constant, so PostgreSQL finds them by the version index (counted for all versions at once, the plans
    read every tenant's chunks: docs/BENCHMARKS.md, "Knowledge lifecycle")."""
    chunks = Chunk.objects.filter(kb_version_id=version.pk)
    if reader is not None:
        chunks = chunks.filter(acl__overlap=list(reader))
    counts = chunks.aggregate(chunk_count=Count("id"), document_count=Count("document_id", distinct=True))
    version.chunk_count, version.document_count = counts["chunk_count"], counts["document_count"]
    return version


def task_status(tenant: Tenant, task_id: str, reachable: Collection[int] | None = None) -> dict[str, Any]:
    """State, progress, result and error of a task the tenant started (``GET /api/v1/tasks/{id}``);
    another tenant's task, or one of a KB outside ``reachable``, is reported exactly like one that does not exist."""
    records = KnowledgeTask.objects.filter(tenant=tenant, task_id=task_id)
    if reachable is not None:
        records = records.filter(knowledge_base_id__in=list(reachable))
    record = records.first()
    if record is None:
        raise TaskNotFound(f"unknown task id: {task_id}")
    meta = AsyncResult(task_id).backend.get_task_meta(task_id)  # one read: state and info must agree
    state, info = meta["status"], meta["result"]
    status = {"task_id": task_id, "kind": record.kind, "knowledge_base": record.knowledge_base_id, "state": state}
    status.update(progress=None, result=None, error=None)
    if state == KnowledgeTask.PROGRESS:
        status["progress"] = info
    elif state == "SUCCESS":
        status["result"] = dict(info)
        status["progress"] = status["result"].pop("progress", None)
    elif isinstance(info, BaseException):  # FAILURE, or RETRY after a transient error
        status["error"] = f"{type(info).__name__}: {info}"
    return status


def tenant_stats(
    tenant: Tenant, reachable: Collection[int] | None = None, reader: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """What the tenant holds, how many queries it was served and what it consumed (``GET /api/v1/stats``);
    of a KB-limited key, only its KBs (``reachable``); of a reader, only the documents and chunks it may read."""
    kbs = KnowledgeBase.objects.filter(tenant=tenant)
    if reachable is not None:
        kbs = kbs.filter(pk__in=list(reachable))
    documents = Document.objects.filter(tenant=tenant, knowledge_base__in=kbs)
    chunks = Chunk.objects.filter(tenant=tenant, kb_version__in=kbs.values("active_version"))
    if reader is not None:
        documents, chunks = documents.filter(readable_by(reader)), chunks.filter(acl__overlap=list(reader))
    by_status = dict(documents.order_by().values_list("status").annotate(Count("id")))
    return {
        "tenant": tenant.name,
        "knowledge_bases": kbs.count(),
        "documents": {
            "total": sum(by_status.values()),
            "by_status": {status: by_status.get(status, 0) for status in Document.Status.values},
        },
        "chunks": chunks.count(),
        "queries": query_counts(tenant.pk),
        "cost": tenant_costs(tenant.pk),
    }
