"""The graph's Celery task: a version's communities, after each ingestion and version build (knowledge's
tasks send it by name, ``knowledge.tasks.COMMUNITIES_TASK``; the graph's writes queue it through
``knowledge.queue``). Retried as the knowledge tasks are."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from graph.community_build import rebuild_communities
from knowledge.models import KnowledgeBaseVersion
from knowledge.queue import register
from knowledge.tasks import RETRIES


@shared_task(**RETRIES)  # type: ignore[untyped-decorator]  # Celery ships no types
def detect_communities(version_id: int) -> dict[str, Any]:
    """The version's graph communities and their summaries, after an ingestion or a build (a version
    purged meanwhile has none to compute)."""
    version = KnowledgeBaseVersion.objects.select_related("knowledge_base").filter(pk=version_id).first()
    if version is None:
        return {"version_id": version_id, "communities": None}
    return {"version_id": version_id, "communities": rebuild_communities(version)}


register(detect_communities)  # queued by name (knowledge.queue)
