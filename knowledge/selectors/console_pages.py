"""The reads of the knowledge console's pages: each KB at a glance and its recent tasks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from knowledge.models import (
    Chunk,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    KnowledgeSource,
    KnowledgeTask,
    SourceRun,
)
from knowledge.selectors.api import source_schedule, sources_with_schedule
from tenants.models import Tenant


@dataclass(frozen=True)
class KnowledgeBaseGlance:
    """One KB as the console's overview shows it."""

    kb: KnowledgeBase
    documents_by_status: dict[str, int]
    chunks: int  # in the active version
    last_errors: list[Document]  # failed documents, the latest first
    building: list[tuple[KnowledgeBaseVersion, KnowledgeTask | None]]  # versions in build, with their task
    sources: list[tuple[KnowledgeSource, dict[str, Any], SourceRun | None]]  # with their schedule and last run


def knowledge_bases_at_a_glance(
    tenants: Iterable[Tenant], errors_shown: int = 5, only: int | None = None
) -> list[KnowledgeBaseGlance]:
    """The tenants' KBs (or the one of id ``only``) with their documents by status, active chunks,
    latest failures, versions in build and sources."""
    found = KnowledgeBase.objects.filter(tenant__in=tenants).select_related("tenant", "active_version")
    kbs = list((found if only is None else found.filter(pk=only)).order_by("tenant__name", "name"))
    statuses: dict[int, dict[str, int]] = {kb.pk: dict.fromkeys(Document.Status.values, 0) for kb in kbs}
    rows = Document.objects.filter(knowledge_base__in=kbs).order_by().values_list("knowledge_base", "status")
    for kb_id, status, count in rows.annotate(Count("id")):
        statuses[kb_id][status] = count
    chunks = dict(
        Chunk.objects.filter(kb_version__in=[kb.active_version_id for kb in kbs if kb.active_version_id])
        .order_by().values_list("knowledge_base").annotate(Count("id"))
    )  # fmt: skip
    failed = Document.objects.filter(knowledge_base__in=kbs, status=Document.Status.FAILED).order_by("-updated_at")
    errors: dict[int, list[Document]] = {}
    for document in failed.only("knowledge_base", "source_uri", "error", "updated_at"):
        if len(errors.setdefault(document.knowledge_base_id, [])) < errors_shown:
            errors[document.knowledge_base_id].append(document)
    building, sources = _versions_in_build(kbs), _sources_with_last_run(kbs)
    return [
        KnowledgeBaseGlance(
            kb,
            statuses[kb.pk],
            chunks.get(kb.pk, 0),
            errors.get(kb.pk, []),
            building.get(kb.pk, []),
            sources.get(kb.pk, []),
        )
        for kb in kbs
    ]


def _sources_with_last_run(
    kbs: list[KnowledgeBase],
) -> dict[int, list[tuple[KnowledgeSource, dict[str, Any], SourceRun | None]]]:
    """Each KB's sources with their schedule and latest run (one query for the runs of all of them)."""
    sources = list(sources_with_schedule(KnowledgeSource.objects.filter(knowledge_base__in=kbs)))
    runs = (
        SourceRun.objects.filter(source__in=sources).order_by("source_id", "-started_at", "-id").distinct("source_id")
    )
    last = {run.source_id: run for run in runs}
    by_kb: dict[int, list[tuple[KnowledgeSource, dict[str, Any], SourceRun | None]]] = {}
    for source in sources:
        by_kb.setdefault(source.knowledge_base_id, []).append((source, source_schedule(source), last.get(source.pk)))
    return by_kb


def _versions_in_build(kbs: list[KnowledgeBase]) -> dict[int, list[tuple[KnowledgeBaseVersion, KnowledgeTask | None]]]:
    """Each KB's building versions with the task building them: its latest build task (one builds at a time)."""
    versions = KnowledgeBaseVersion.objects.filter(knowledge_base__in=kbs, status=KnowledgeBaseVersion.Status.BUILDING)
    tasks = {
        task.knowledge_base_id: task
        for task in KnowledgeTask.objects.filter(knowledge_base__in=kbs, kind=KnowledgeTask.Kind.BUILD_VERSION)
        .select_related("tenant").order_by("knowledge_base_id", "-created_at").distinct("knowledge_base_id")
    }  # fmt: skip
    building: dict[int, list[tuple[KnowledgeBaseVersion, KnowledgeTask | None]]] = {}
    for version in versions.order_by("number"):
        building.setdefault(version.knowledge_base_id, []).append((version, tasks.get(version.knowledge_base_id)))
    return building


def recent_tasks_of(kb: KnowledgeBase, count: int = 10) -> list[KnowledgeTask]:
    """The KB's latest ingestion and build tasks, newest first."""
    tasks = KnowledgeTask.objects.filter(knowledge_base=kb).select_related("tenant")
    return list(tasks.order_by("-created_at")[:count])
