"""The console's search analytics: per tenant and knowledge base, what clients searched and where
the answers fell short (``retrieval.search_analytics``), each query one click from the retrieval
testing page and from a synonym or protected term made of its tokens. Registered by ``retrieval.admin``."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.db.models import QuerySet
from django.template.response import TemplateResponse

from knowledge.models import KnowledgeBase
from knowledge.selectors.search import analyzer_for_tenant
from retrieval.search_analytics import QueryStats, search_analytics
from retrieval.search_console import curation_links, offer_knowledge_bases, testing_link
from tenants.models import Tenant
from tenants.requests import ConsoleRequest
from tenants.selectors import tenants_visible_to

# Best ``relevance`` under this is a weak answer: the off-topic bound (a raw 0.3, retrieval.relevance) on
# the calibrated scale (retrieval.relevance_calibration: 0.13); a curator lowers or raises it on the page.
DEFAULT_THRESHOLD = 0.13


class AnalyticsForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    knowledge_base = forms.ModelChoiceField(
        queryset=KnowledgeBase.objects.none(), required=False, empty_label="all of the tenant's"
    )
    days = forms.IntegerField(
        min_value=1, max_value=365, initial=7, help_text="the window; the trend compares the one before"
    )
    threshold = forms.FloatField(
        min_value=0, max_value=1, initial=DEFAULT_THRESHOLD, help_text="best relevance under it is low"
    )

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offer_knowledge_bases(self, tenants, "knowledge_base")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        tenant, kb = data.get("tenant"), data.get("knowledge_base")
        if tenant and kb and kb.tenant_id != tenant.pk:
            self.add_error("knowledge_base", f"not a knowledge base of {tenant.name}")
        return data


def analytics_view(request: ConsoleRequest, context: dict[str, Any]) -> TemplateResponse:
    """GET: the form; with a tenant chosen, its lists (the first visible tenant when there is one only)."""
    tenants = tenants_visible_to(request.user)
    params = request.GET.copy()
    if "tenant" not in params and tenants.count() == 1:
        params["tenant"] = str(tenants.get().pk)
    defaults = {name: str(field.initial) for name, field in AnalyticsForm.base_fields.items() if field.initial}
    form = AnalyticsForm({**defaults, **params.dict()} if "tenant" in params else None, tenants=tenants)
    lists = None
    if form.is_bound and form.is_valid():
        tenant, kb = form.cleaned_data["tenant"], form.cleaned_data["knowledge_base"]
        analytics = search_analytics(
            tenant, kb, days=form.cleaned_data["days"], threshold=form.cleaned_data["threshold"]
        )
        analyzer = analyzer_for_tenant(tenant.pk)
        kb_ids = [kb.pk] if kb else []

        def rows(stats: list[QueryStats]) -> list[dict[str, Any]]:
            return [
                {
                    "stats": item,
                    "test": testing_link(tenant.pk, item.query, item.mode, kb_ids),
                    "curation": curation_links(tenant, item.query, analyzer),
                }
                for item in stats
            ]

        lists = {
            "searches": analytics.searches,
            "kb": kb,  # a chosen KB: the lists but the top one send a query to its query set
            "recording": tenant.record_searches,
            "sections": [
                ("top", "Top queries", rows(analytics.top)),
                ("no-results", "No results", rows(analytics.no_results)),
                ("low-relevance", "Best relevance under the threshold", rows(analytics.low_relevance)),
                ("disagreeing", "BM25 and dense disagree (no shared hit in their first five)",
                 rows(analytics.disagreeing)),
            ],
        }  # fmt: skip
    context.update(form=form, lists=lists, has_tenants=tenants.exists(),
                   retention_days=settings.SEARCH_LOG_RETENTION_DAYS)  # fmt: skip
    return TemplateResponse(request, "admin/retrieval/analytics.html", context)
