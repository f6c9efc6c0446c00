"""Celery tasks of the knowledge lifecycle: thin shells around ``knowledge.services``.

Declared with ``@shared_task`` (they bind to the app ``retrieval_site.celery`` loads), so this app
never imports the wiring. Transient failures (database, Redis, embedder, a busy keyword index) retry
with exponential backoff and jitter, up to ``TASK_MAX_RETRIES``; anything else (a deleted knowledge
base, a bug) fails at once. Bad files never fail a task: their documents are marked failed.
"""
from __future__ import annotations

from celery import Task, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from engines.base import LexicalIndexError
from engines.embedders import EmbeddingError
from knowledge.models import KnowledgeBase, KnowledgeTask
from knowledge.services import fail_pending_documents, ingest_stored_files

TRANSIENT_ERRORS = (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError, EmbeddingError, LexicalIndexError)

class Progress:
    """Reports a task's progress (``update_state``), readable through ``GET /api/v1/tasks/{id}``."""

    def __init__(self, task: Task, total: int, unit: str):
        self.task, self.done, self.total, self.unit = task, 0, total, unit
        self._report()

    def advance(self, count: int) -> None:
        self.done += count
        self._report()

    def as_dict(self) -> dict:
        return {"done": self.done, "total": self.total, "unit": self.unit}

    def _report(self) -> None:
        self.task.update_state(state=KnowledgeTask.PROGRESS, meta=self.as_dict())


class IngestTask(Task):
    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        """Given up (retries exhausted, or not retryable): no document of the task stays pending."""
        kb_id, files = args
        fail_pending_documents(kb_id, files, f"ingestion failed: {exc}")


@shared_task(
    bind=True,
    base=IngestTask,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=True,
    retry_backoff_max=settings.TASK_RETRY_BACKOFF_MAX_S,
    retry_jitter=True,
    max_retries=settings.TASK_MAX_RETRIES,
)
def ingest_documents(self, kb_id: int, files: list[dict]) -> dict:
    """Parse, chunk, embed and write stored files into a KB's active version; progress in documents."""
    kb = KnowledgeBase.objects.select_related("active_version").get(pk=kb_id)
    progress = Progress(self, total=len(files), unit="documents")
    report = ingest_stored_files(kb, files, on_progress=progress.advance)
    failures = [{"name": name, "error": error} for name, error in report.failures]
    return {**report.as_dict(), "failures": failures, "progress": progress.as_dict()}
