"""Celery tasks of the search side: thin shells around its services (bound by ``@shared_task``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from retrieval import semantic_cache
from retrieval.evaluation import gate, kb_runs
from retrieval.search_log import purge_old_search_logs


@shared_task  # type: ignore[untyped-decorator]  # Celery ships no type information
def purge_search_logs() -> int:
    """Beat runs it hourly: searched queries older than SEARCH_LOG_RETENTION_DAYS go."""
    return purge_old_search_logs(settings.SEARCH_LOG_RETENTION_DAYS)


@shared_task  # type: ignore[untyped-decorator]  # Celery ships no type information
def purge_semantic_cache() -> int:
    """Beat runs it hourly: the semantic cache's rows whose answers expired go."""
    return semantic_cache.purge_expired()


@shared_task(name="retrieval.tasks.evaluate_knowledge_base")  # type: ignore[untyped-decorator]  # Celery ships no type information
def evaluate_knowledge_base(run_id: int) -> str | None:
    """One evaluation run of a KB on its query set (``retrieval.evaluation.kb_runs``): its status."""
    run = kb_runs.execute_evaluation(run_id)
    return None if run is None else run.status


@shared_task(name="retrieval.tasks.gate_version")  # type: ignore[untyped-decorator]  # Celery ships no type information
def gate_version(version_id: int) -> dict[str, Any] | None:
    """A version built with ``activate: "gated"``: compared with the active one, switched if it passes."""
    gate_record = gate.gate_version(version_id)
    return None if gate_record is None else {"passes": gate_record.passes, "activated": gate_record.activated}
