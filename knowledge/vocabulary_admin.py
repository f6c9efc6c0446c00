"""The vocabulary pages of the knowledge console: protected terms and synonym groups, each with a bulk
import (``knowledge.console.import_view``) and exports in the formats ``knowledge.vocabulary`` reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from core.admin import ConflictsAnsweredAdmin
from knowledge import console, vocabulary
from knowledge.models import DictionaryTerm, Synonym

# The mixin extends a ModelAdmin: typed as one, a plain class at run time.
if TYPE_CHECKING:
    _AdminMixin = admin.ModelAdmin[Any]
else:
    _AdminMixin = object


class BulkImportExport(_AdminMixin):
    """An ``Import`` link on the change list (``knowledge.console.import_view``) and export actions."""

    import_formats: list[str] = []

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.import_view)
        name = f"{self.opts.app_label}_{self.opts.model_name}_import"
        return [path("import/", view, name=name), *super().get_urls()]

    def import_view(self, request: HttpRequest) -> HttpResponse:
        title = f"Import {self.opts.verbose_name_plural}"
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": title}
        return console.import_view(request, context, model_admin=self, formats=self.import_formats)

    def _download(self, text: str, filename: str) -> HttpResponse:
        content_type = "text/csv" if filename.endswith(".csv") else "text/plain"
        response = HttpResponse(text, content_type=f"{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


@admin.register(DictionaryTerm)
class DictionaryTermAdmin(BulkImportExport, ConflictsAnsweredAdmin):
    """Protected terms change tokenization: rebuild the keyword index afterwards
    (``manage.py rebuild_lexical_index``); searches say so until then."""

    list_display = ["value", "kind", "tenant", "note", "created_at"]
    list_filter = ["kind", "tenant"]
    search_fields = ["value", "note"]
    import_formats = [vocabulary.TERMS_CSV]
    actions = ["export_csv"]

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[DictionaryTerm]) -> HttpResponse:
        return self._download(vocabulary.export_terms_csv(queryset), "protected-terms.csv")


@admin.register(Synonym)
class SynonymAdmin(BulkImportExport, ConflictsAnsweredAdmin):
    list_display = ["__str__", "kind", "weight", "is_active", "tenant"]
    list_filter = ["kind", "is_active", "tenant"]
    search_fields = ["terms", "replacements"]
    import_formats = [vocabulary.SYNONYMS_CSV, vocabulary.SYNONYMS_SOLR]
    actions = ["export_csv", "export_solr"]

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Synonym]) -> HttpResponse:
        return self._download(vocabulary.export_synonyms_csv(queryset), "synonyms.csv")

    @admin.action(description="Export selected in Solr format (active rules)", permissions=["view"])
    def export_solr(self, request: HttpRequest, queryset: QuerySet[Synonym]) -> HttpResponse:
        return self._download(vocabulary.export_synonyms_solr(queryset), "synonyms.txt")
