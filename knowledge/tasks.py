"""Celery tasks of the knowledge lifecycle: thin shells around the knowledge writes.

Declared with ``@shared_task`` (they bind to the app ``retrieval_site.celery`` loads), so this app
never imports the wiring. Transient failures (database, Redis, embedder, a busy keyword index) retry
with exponential backoff and jitter, up to ``TASK_MAX_RETRIES``; anything else (a deleted knowledge
base, a bug) fails at once. Bad files never fail a task: their documents are marked failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Task, current_app, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from engines.base import LexicalIndexError
from engines.embedders import EmbeddingError
from knowledge import sources
from knowledge.documents import purge_document_rows, purge_documents_removed_before
from knowledge.ingestion.stored import fail_pending_documents, ingest_stored_files
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion, KnowledgeSource, KnowledgeTask, SourceRun
from knowledge.queue import register
from knowledge.versions import (
    GATE_TASK,
    GATED,
    activate_version,
    fail_version,
    fill_version,
    purge_old_versions,
    version_build_files,
)

COMMUNITIES_TASK = "graph.tasks.detect_communities"  # a version's graph communities (the graph app's task)
TRANSIENT_ERRORS = (
    OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError, EmbeddingError, LexicalIndexError,
)  # fmt: skip


class Progress:
    """Reports a task's progress (``update_state``), readable through ``GET /api/v1/tasks/{id}``."""

    def __init__(self, task: Task, total: int, unit: str):
        self.task, self.done, self.total, self.unit = task, 0, total, unit
        self._report()

    def advance(self, count: int) -> None:
        self.done += count
        self._report()

    def as_dict(self) -> dict[str, int | str]:
        return {"done": self.done, "total": self.total, "unit": self.unit}

    def _report(self) -> None:
        self.task.update_state(state=KnowledgeTask.PROGRESS, meta=self.as_dict())


@contextmanager
def when_giving_up(task: Task, record: Callable[[Exception], None]) -> Iterator[None]:
    """Run ``record`` when the task fails for good (an error not retried, or the last retry), before
    the failure is stored: whoever sees the task failed sees what it left recorded too."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, TRANSIENT_ERRORS) or task.request.retries >= task.max_retries:
            record(exc)
        raise


# Celery ships no types: ``shared_task`` typed as what it is, a decorator factory giving a Task.
celery_task: Callable[..., Callable[[Callable[..., object]], Task]] = shared_task

RETRIES: dict[str, Any] = {
    "autoretry_for": TRANSIENT_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": settings.TASK_RETRY_BACKOFF_MAX_S,
    "retry_jitter": True,
    "max_retries": settings.TASK_MAX_RETRIES,
}


@celery_task(bind=True, **RETRIES)
def ingest_documents(self: Task, kb_id: int, files: list[dict[str, Any]]) -> dict[str, object]:
    """Parse, chunk, embed and write stored files into a KB's active version; progress in documents.
    Given up, its documents still pending are failed, so none waits forever. When anything changed,
    the version's graph communities are rebuilt by a task of their own (``communities_task``)."""
    with when_giving_up(self, lambda exc: fail_pending_documents(kb_id, files, f"ingestion failed: {exc}")):
        kb = KnowledgeBase.objects.select_related("active_version").get(pk=kb_id)
        progress = Progress(self, total=len(files), unit="documents")
        report = ingest_stored_files(kb, files, on_progress=progress.advance)
    communities = queue_communities(kb.require_active_version().pk) if report.added or report.replaced else None
    failures = [{"name": name, "error": error} for name, error in report.failures]
    return {**report.as_dict(), "failures": failures, "progress": progress.as_dict(), "communities_task": communities}


@celery_task(bind=True, **RETRIES)
def build_version(self: Task, version_id: int, activate: bool | str) -> dict[str, object]:
    """Build a new KB version from the stored originals while searches read the active one; with
    ``activate``, switch to it once it validates (``"gated"``: once it also measures no worse than the
    active one, ``retrieval.evaluation.gate``). Progress in documents. Given up, the version is
    failed, so it is never activated and another build may start."""
    with when_giving_up(self, lambda exc: fail_version(version_id, f"build failed: {exc}")):
        version = KnowledgeBaseVersion.objects.get(pk=version_id)
        if version.status != KnowledgeBaseVersion.Status.BUILDING:  # a redelivered finished build does nothing
            return _build_result(version, progress=None)
        files = version_build_files(version)
        progress = Progress(self, total=len(files), unit="documents")
        version = fill_version(version, files, on_progress=progress.advance)
        if version.status == KnowledgeBaseVersion.Status.READY:
            queue_communities(version.pk)
        if activate == GATED and version.status == KnowledgeBaseVersion.Status.READY:
            # the search side compares it with the active version on the KB's query set, then switches or not;
            # sent by name, so this app imports nothing of retrieval's
            current_app.send_task(GATE_TASK, (version.pk,))
        elif activate and version.status == KnowledgeBaseVersion.Status.READY:
            version = activate_version(version)
    return _build_result(version, progress)


@celery_task(**RETRIES)
def purge_versions() -> int:
    """Beat runs it hourly: versions retired or failed more than KB_VERSION_RETENTION_DAYS ago go."""
    return purge_old_versions(settings.KB_VERSION_RETENTION_DAYS)


@celery_task(bind=True, **RETRIES)
def sync_source(self: Task, source_id: int, trigger: str = SourceRun.Trigger.SCHEDULE) -> dict[str, object]:
    """Beat sends it on the source's schedule (``POST .../sync`` and the admin with ``manual``): the KB
    made equal to its source, recorded as a run. Progress in documents (known once the source is walked).
    A source deleted meanwhile, or one another sync is running for, is skipped."""
    source = KnowledgeSource.objects.filter(pk=source_id).first()
    if source is None:
        return {"skipped": "the source was deleted"}
    progress: list[Progress] = []

    def start_progress(total: int) -> Callable[[int], None]:
        progress.append(Progress(self, total=total, unit="documents"))
        return progress[0].advance

    run = sources.sync(source, trigger=trigger, start_progress=start_progress)
    if run is None:
        return {"skipped": "another sync of this source is running"}
    counts = {name: getattr(run, name) for name in ("added", "replaced", "unchanged", "removed", "failed")}
    return {"run": run.pk, **counts, "failures": run.failures, "progress": progress[0].as_dict() if progress else None}


@celery_task(**RETRIES)
def purge_documents(document_ids: list[int]) -> int:
    """After a delete: the documents' rows and stored originals (their chunks left search already)."""
    return purge_document_rows(document_ids)


@celery_task(**RETRIES)
def purge_removed_documents() -> int:
    """Beat runs it hourly: documents gone from their source more than SOURCE_REMOVAL_GRACE_HOURS ago."""
    return purge_documents_removed_before(settings.SOURCE_REMOVAL_GRACE_HOURS)


def queue_communities(version_id: int) -> str:
    """Send the graph's task that computes the version's communities; returns its id. Sent by name, so
    this app imports nothing of the graph's."""
    task_id: str = current_app.send_task(COMMUNITIES_TASK, (version_id,)).id
    return task_id


def _build_result(version: KnowledgeBaseVersion, progress: Progress | None) -> dict[str, object]:
    done = progress.as_dict() if progress else None
    return {"version": version.number, "status": version.status, "error": version.error, "progress": done}


register(ingest_documents, build_version, sync_source, purge_documents)  # queued by name (knowledge.queue)
