"""Reads of the search analytics: what a tenant's clients asked (``retrieval.search_log``) and where
the answers fell short, per knowledge base, for the console's curators.

Each list groups the window's rows by (query, mode): the top queries with their volume against the
window before (the trend), the queries with no hit, those whose best ``relevance`` stayed under a
threshold, and those where BM25 and dense shared no hit in their first five.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils import timezone

from knowledge.models import KnowledgeBase
from retrieval.models import SearchLog
from tenants.models import Tenant

ROWS_SHOWN = 50


@dataclass(frozen=True)
class QueryStats:
    query: str
    mode: str
    volume: int  # searches in the window
    last_seen: datetime
    previous: int = 0  # searches in the window before (top queries)
    best_relevance: float | None = None  # the lowest best relevance in the window (low relevance)

    @property
    def trend(self) -> str:
        """The volume against the window before: "new", "=", "+n" or "-n"."""
        if not self.previous:
            return "new"
        change = self.volume - self.previous
        return "=" if change == 0 else f"{change:+d}"


@dataclass(frozen=True)
class SearchAnalytics:
    top: list[QueryStats]
    no_results: list[QueryStats]
    low_relevance: list[QueryStats]
    disagreeing: list[QueryStats]
    searches: int  # in the window


def search_analytics(tenant: Tenant, kb: KnowledgeBase | None, *, days: int, threshold: float) -> SearchAnalytics:
    """The lists of ``tenant``'s searches of the last ``days`` days that covered ``kb`` (a search of all
    the tenant's KBs covers each; None: every search of the tenant)."""
    now = timezone.now()
    since, before = now - timedelta(days=days), now - timedelta(days=2 * days)
    rows = searches_of(tenant, kb)
    window = rows.filter(created_at__gte=since)
    top = list(
        _grouped(rows.filter(created_at__gte=before), since)
        .filter(volume__gt=0)
        .order_by("-volume", "-last_seen", "query")[:ROWS_SHOWN]
    )
    return SearchAnalytics(
        top=[QueryStats(**row) for row in top],
        no_results=_listed(window.filter(hits=0)),
        low_relevance=_listed(
            window.filter(hits__gt=0, best_relevance__lt=threshold), best_relevance=Min("best_relevance")
        ),
        disagreeing=_listed(window.filter(legs_disagree=True)),
        searches=window.count(),
    )


def searches_of(tenant: Tenant, kb: KnowledgeBase | None) -> QuerySet[SearchLog]:
    """The tenant's recorded searches that covered ``kb`` (None: all of them)."""
    rows = SearchLog.objects.filter(tenant=tenant)
    if kb is not None:
        rows = rows.filter(Q(kb_ids__contains=[kb.pk]) | Q(kb_ids=[]))  # [] : all the tenant's KBs
    return rows


def _grouped(rows: QuerySet[SearchLog], since: datetime) -> QuerySet[Any, Any]:
    return rows.values("query", "mode").annotate(
        volume=Count("id", filter=Q(created_at__gte=since)),
        previous=Count("id", filter=Q(created_at__lt=since)),
        last_seen=Max("created_at"),
    )


def _listed(rows: QuerySet[SearchLog], **extra: Any) -> list[QueryStats]:
    grouped = rows.values("query", "mode").annotate(volume=Count("id"), last_seen=Max("created_at"), **extra)
    return [QueryStats(**row) for row in grouped.order_by("-volume", "-last_seen", "query")[:ROWS_SHOWN]]
