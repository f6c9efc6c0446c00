"""Celery tasks of the search side: thin shells around its services (bound by ``@shared_task``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from retrieval import semantic_cache
from retrieval.search_log import purge_old_search_logs


@shared_task
def purge_search_logs() -> int:
    """Beat runs it hourly: searched queries older than SEARCH_LOG_RETENTION_DAYS go."""
    return purge_old_search_logs(settings.SEARCH_LOG_RETENTION_DAYS)


@shared_task
def purge_semantic_cache() -> int:
    """Beat runs it hourly: the semantic cache's rows whose answers expired go."""
    return semantic_cache.purge_expired()
