"""Celery: broker and results on the cache's Redis (embedded by default), each in its own logical
database, unless given URLs of their own."""

from __future__ import annotations

from pydantic import NonNegativeInt, PositiveInt

from retrieval_site.settings.base import Section


class Tasks(Section):
    title = "Background tasks (Celery)"

    CELERY_BROKER_URL: str = ""
    CELERY_RESULT_BACKEND: str = ""
    CELERY_BROKER_DB: NonNegativeInt = 1
    CELERY_RESULT_DB: NonNegativeInt = 2
    CELERY_CONCURRENCY: PositiveInt = 1  # worker processes of `./run serve`'s worker
    # A task taken by a worker that died (kill -9, lost machine) is handed out again this long after it
    # was taken: longer than the longest task (a version build), or a slow task would run twice at once.
    CELERY_VISIBILITY_TIMEOUT_S: PositiveInt = 3600
    TASK_RESULT_TTL_S: PositiveInt = 7 * 24 * 3600
    # Transient failures (database, Redis, remote embedder) retry with exponential backoff and jitter.
    TASK_MAX_RETRIES: NonNegativeInt = 5
    TASK_RETRY_BACKOFF_MAX_S: PositiveInt = 300
