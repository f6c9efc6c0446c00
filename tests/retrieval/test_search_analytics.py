"""The search analytics' lists over recorded searches: volume and trend, no results, weak relevance,
disagreeing legs; per knowledge base, per tenant, within the window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from retrieval.search_analytics import search_analytics
from tests.factories import KnowledgeBaseFactory, SearchLogFactory

pytestmark = pytest.mark.django_db


def days_ago(days: float):
    return timezone.now() - timedelta(days=days)


def queries(stats) -> list[str]:
    return [item.query for item in stats]


def test_top_queries_rank_by_volume_with_the_trend_against_the_window_before(tenant):
    for age in (1, 2, 3):
        SearchLogFactory(tenant=tenant, query="reset router", created_at=days_ago(age))
    SearchLogFactory(tenant=tenant, query="reset router", created_at=days_ago(9))
    for age in (1, 2):
        SearchLogFactory(tenant=tenant, query="wifi password", created_at=days_ago(age))
    for age in (8, 9, 10):
        SearchLogFactory(tenant=tenant, query="wifi password", created_at=days_ago(age))
    SearchLogFactory(tenant=tenant, query="old news", created_at=days_ago(10))  # only before the window

    analytics = search_analytics(tenant, None, days=7, threshold=0.3)
    assert [(item.query, item.volume, item.previous, item.trend) for item in analytics.top] == [
        ("reset router", 3, 1, "+2"),
        ("wifi password", 2, 3, "-1"),
    ]
    assert analytics.searches == 5


def test_the_shortfall_lists_hold_only_their_queries(tenant):
    SearchLogFactory(tenant=tenant, query="quantum chromodynamics", hits=0, best_relevance=None, legs_disagree=None)
    SearchLogFactory(tenant=tenant, query="weak answer", best_relevance=0.1)
    SearchLogFactory(tenant=tenant, query="weak answer", best_relevance=0.2)
    SearchLogFactory(tenant=tenant, query="legs apart", legs_disagree=True)
    SearchLogFactory(tenant=tenant, query="fine")

    analytics = search_analytics(tenant, None, days=7, threshold=0.3)
    assert queries(analytics.no_results) == ["quantum chromodynamics"]
    [weak] = analytics.low_relevance
    assert (weak.query, weak.volume, weak.best_relevance) == ("weak answer", 2, pytest.approx(0.1))
    assert queries(analytics.disagreeing) == ["legs apart"]
    assert queries(search_analytics(tenant, None, days=7, threshold=0.15).low_relevance) == ["weak answer"]
    assert search_analytics(tenant, None, days=7, threshold=0.05).low_relevance == []


def test_a_knowledge_base_sees_its_searches_and_those_of_all_the_tenants_kbs_and_no_other_tenants():
    kb = KnowledgeBaseFactory()
    other_kb = KnowledgeBaseFactory(tenant=kb.tenant)
    SearchLogFactory(tenant=kb.tenant, query="this kb", kb_ids=[kb.pk])
    SearchLogFactory(tenant=kb.tenant, query="both", kb_ids=[kb.pk, other_kb.pk])
    SearchLogFactory(tenant=kb.tenant, query="every kb", kb_ids=[])
    SearchLogFactory(tenant=kb.tenant, query="the other kb", kb_ids=[other_kb.pk])
    SearchLogFactory(query="another tenant", kb_ids=[])

    assert sorted(queries(search_analytics(kb.tenant, kb, days=7, threshold=0.3).top)) == [
        "both",
        "every kb",
        "this kb",
    ]
    assert len(search_analytics(kb.tenant, None, days=7, threshold=0.3).top) == 4
