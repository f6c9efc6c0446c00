"""The console's retrieval testing, as the admin page of the runs it keeps: the index lists it as
"Retrieval testing"; its list is the testing page (with the user's history), ``compare/`` and the
search analytics (``analytics/``) beside it."""

from typing import Any, cast

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from core.admin import ReadOnlyAdminMixin
from retrieval import analytics_console, query_set_console, search_console
from retrieval.models import RetrievalRun
from tenants.requests import ConsoleRequest


@admin.register(RetrievalRun)
class RetrievalTestingAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[RetrievalRun]):
    """Any staff user may test; what they can search is what ``tenants_visible_to`` lets them see.
    Runs are made by the page and seen only by their own user."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request: HttpRequest, obj: RetrievalRun | None = None) -> bool:
        return self.has_module_permission(request) and (obj is None or obj.user_id == request.user.pk)

    def get_urls(self) -> list[URLPattern]:
        compare = self.admin_site.admin_view(self.compare_view)
        analytics = self.admin_site.admin_view(self.analytics_view)
        view = self.admin_site.admin_view
        return [
            path("judge/", view(query_set_console.judge_view), name="retrieval_retrievalrun_judge"),
            path("query-set/add/", view(query_set_console.add_query_view), name="retrieval_retrievalrun_add_query"),
            path("query-set/", view(self.query_set_view), name="retrieval_retrievalrun_query_set"),
            path("evaluations/<int:run_id>/", view(self.evaluation_view), name="retrieval_retrievalrun_evaluation"),
            path(
                "evaluations/<int:run_id>/status/",
                view(query_set_console.evaluation_status_view),
                name="retrieval_retrievalrun_evaluation_status",
            ),
            path("compare/", compare, name="retrieval_retrievalrun_compare"),
            path("analytics/", analytics, name="retrieval_retrievalrun_analytics"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        request = cast(ConsoleRequest, request)  # admin_view let in a staff user
        return search_console.testing_view(request, self._context(request, "Retrieval testing"))

    def compare_view(self, request: ConsoleRequest) -> TemplateResponse:
        return search_console.compare_view(request, self._context(request, "Compare retrieval settings"))

    def analytics_view(self, request: ConsoleRequest) -> TemplateResponse:
        return analytics_console.analytics_view(request, self._context(request, "Search analytics"))

    def query_set_view(self, request: ConsoleRequest) -> HttpResponse:
        return query_set_console.query_set_view(request, self._context(request, "Query sets and evaluation runs"))

    def evaluation_view(self, request: ConsoleRequest, run_id: int) -> HttpResponse:
        return query_set_console.evaluation_view(request, run_id, self._context(request, f"Evaluation run #{run_id}"))

    def _context(self, request: HttpRequest, title: str) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title}
