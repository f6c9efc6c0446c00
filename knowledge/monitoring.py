"""What the knowledge app shows Prometheus at each scrape (``core.metrics``' state gauges): versions
by status, how long the oldest build has run, and each source's failed syncs in a row.

Read from the database because the Celery workers that build versions and sync sources are not
scraped; ``docs/alerts.md`` says which alert reads which.
"""

from __future__ import annotations

from itertools import groupby

from django.db.models import Count, Min
from django.utils import timezone

from core import metrics
from knowledge.models import KnowledgeBaseVersion, SourceRun


def versions_by_status() -> dict[tuple[str, ...], float]:
    """Every status, 0 included: a rule comparing the failed count over time needs its series."""
    counts = dict(KnowledgeBaseVersion.objects.order_by().values_list("status").annotate(Count("id")))
    return {(status,): counts.get(status, 0) for status in KnowledgeBaseVersion.Status.values}


def oldest_build_age_s() -> dict[tuple[str, ...], float]:
    building = KnowledgeBaseVersion.objects.filter(status=KnowledgeBaseVersion.Status.BUILDING)
    started = building.aggregate(started=Min("created_at"))["started"]
    return {(): (timezone.now() - started).total_seconds() if started else 0.0}


def consecutive_sync_failures() -> dict[tuple[str, ...], float]:
    """Per source that has run: its latest finished runs that failed, up to its last success (a running
    sync neither counts nor breaks the streak). Sources keep at most ``sources.RUNS_KEPT`` runs."""
    runs = (
        SourceRun.objects.exclude(status=SourceRun.Status.RUNNING)
        .order_by("source_id", "-started_at", "-id")
        .values_list("source__knowledge_base_id", "source_id", "status")
    )
    streaks: dict[tuple[str, ...], float] = {}
    for (kb_id, source_id), rows in groupby(runs, key=lambda row: row[:2]):
        failed = 0
        for *_, status in rows:
            if status != SourceRun.Status.FAILED:
                break
            failed += 1
        streaks[(str(kb_id), str(source_id))] = failed
    return streaks


def connect() -> None:
    metrics.KB_VERSIONS.read_by(versions_by_status)
    metrics.OLDEST_BUILD_AGE.read_by(oldest_build_age_s)
    metrics.SOURCE_SYNC_FAILURES.read_by(consecutive_sync_failures)
