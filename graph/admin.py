"""The graph browsers of the knowledge console, read through the graph store (``graph.selectors``), so
they show the graph in PostgreSQL's tables or in Neo4j alike. Ingestion and the communities task write
the graph; a curator merges, renames or deletes an entity on its curate page, through
``graph.curation`` (the edit is kept as a rule that every later extraction applies)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, re_path, reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString, mark_safe

from core.admin import ReadOnlyAdminMixin
from core.errors import DomainError
from engines.analysis import normalize
from engines.base import GraphStoreError
from graph import curation, selectors
from graph.selectors import BrowsedEntity
from knowledge.models import Chunk, GraphCommunity, GraphEntity, GraphEntityRule, KnowledgeBaseVersion

CURATE_PERMISSION = "knowledge.add_graphentityrule"
# an entity's id: a row's on PostgreSQL, a 63-bit hash on Neo4j (``engines.neo4j_graph.entity_id``)
ENTITY_ID_PATTERN = "[0-9]{1,19}"
MAX_ENTITY_ID = 2**63 - 1
KINDS = ["person", "place", "organisation", "proper", "noun", "code", "name", "phrase", "term"]


class CurateForm(forms.Form):
    action = forms.ChoiceField(choices=GraphEntityRule.Action.choices)
    label = forms.CharField(required=False, max_length=200, help_text="rename: the new name")
    into = forms.CharField(required=False, max_length=200, help_text="merge: the name of the entity it goes into")


def entity_url(entity_id: int, version_id: int) -> str:
    return reverse("admin:knowledge_graphentity_change", args=[entity_id]) + f"?version={version_id}"


class GraphBrowserAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[Any]):
    """A browser of one KB version's graph at a time (``?version=``; the first KB's active one by default)."""

    def _page(
        self, request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
    ) -> TemplateResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        page = {**self.admin_site.each_context(request), "opts": self.opts, **context}
        return TemplateResponse(request, template, page, status=status)

    def _answer(self, request: HttpRequest, build: Callable[[], HttpResponse]) -> HttpResponse:
        """The page, or why the graph store cannot serve it (Neo4j down): a 503 page, never a 500."""
        try:
            return build()
        except GraphStoreError as exc:
            context = {"title": "The graph store did not answer", "cause": exc.cause, "message": exc.message}
            return self._page(request, "admin/graph/unavailable.html", context, status=503)

    def _version(self, request: HttpRequest) -> tuple[list[KnowledgeBaseVersion], KnowledgeBaseVersion | None]:
        asked = request.GET.get("version")
        version = selectors.chosen_version(request.user, asked)
        if asked and version is None:
            raise Http404("no such knowledge base version")
        return selectors.browsable_versions(request.user), version


@admin.register(GraphEntity)
class GraphEntityAdmin(GraphBrowserAdmin):
    """Search a version's entities; an entity's page lists the passages mentioning it and its neighbours."""

    def get_urls(self) -> list[URLPattern]:
        curate = self.admin_site.admin_view(self.curate_view)
        return [
            re_path(rf"^(?P<entity_id>{ENTITY_ID_PATTERN})/curate/$", curate, name="knowledge_graphentity_curate"),
            *super().get_urls(),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return self._answer(request, lambda: self._entities(request))

    def _entities(self, request: HttpRequest) -> HttpResponse:
        versions, version = self._version(request)
        contains, kind = request.GET.get("q", ""), request.GET.get("kind", "")
        asked_page = request.GET.get("p", "1")
        number = max(1, int(asked_page)) if asked_page.isdigit() else 1
        total, nodes = (
            selectors.entity_page(version, contains=contains, kind=kind, page=number - 1) if version else (0, [])
        )
        pages = max(1, -(-total // selectors.ENTITIES_PER_PAGE))
        query = {"version": version.pk if version else "", "q": contains, "kind": kind}
        return self._page(request, "admin/graph/entities.html", {
            "title": "Graph entities", "versions": versions, "version": version, "q": contains, "kind": kind,
            "kinds": KINDS, "total": total, "page": number, "pages": pages,
            "rows": [(node, entity_url(node.entity_id, node.version_id)) for node in nodes],
            "previous": urlencode({**query, "p": number - 1}) if number > 1 else "",
            "next": urlencode({**query, "p": number + 1}) if number < pages else "",
        })  # fmt: skip

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._answer(request, lambda: self._entity_page(request, object_id))

    def _entity_page(self, request: HttpRequest, object_id: str) -> HttpResponse:
        entity = self._entity(request, object_id)
        return self._page(request, "admin/graph/entity.html", {
            "title": entity.label, "entity": entity, "neighbours": self.neighbours(entity),
            "passages": _passage_list((chunk, f"× {count}") for chunk, count in selectors.entity_mentions(entity)),
            "may_curate": request.user.has_perm(CURATE_PERMISSION),
        })  # fmt: skip

    def _entity(self, request: HttpRequest, object_id: str) -> BrowsedEntity:
        if not object_id.isdigit() or int(object_id) > MAX_ENTITY_ID:
            raise Http404("no such entity")
        entity = selectors.find_entity(request.user, int(object_id), request.GET.get("version"))
        if entity is None:
            raise Http404("no such entity")
        return entity

    def curate_view(self, request: HttpRequest, entity_id: str) -> HttpResponse:
        """Merge, rename or delete an entity (its tenant must be one the user may see)."""
        if not request.user.has_perm(CURATE_PERMISSION):
            raise PermissionDenied
        return self._answer(request, lambda: self._curate_page(request, entity_id))

    def _curate_page(self, request: HttpRequest, entity_id: str) -> HttpResponse:
        entity = self._entity(request, entity_id)
        form = CurateForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                return self._curate(request, entity, form.cleaned_data)
            except DomainError as exc:
                form.add_error(None, str(exc))
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "title": f"Curate {entity.label}",
            "entity": entity, "entity_url": entity_url(entity.pk, entity.kb_version_id), "form": form,
            "neighbours": selectors.entity_neighbours(entity),
            "rules": GraphEntityRule.objects.filter(knowledge_base_id=entity.version.knowledge_base_id)
            .order_by("-updated_at")[:50],
        }  # fmt: skip
        return TemplateResponse(request, "admin/graph/graphentity/curate.html", context)

    def _curate(self, request: HttpRequest, entity: BrowsedEntity, data: dict[str, Any]) -> HttpResponseRedirect:
        action = data["action"]
        if action == GraphEntityRule.Action.DELETE:
            curation.delete_entity(entity)
            self.message_user(request, f"{entity.label} was deleted; later ingestions keep it out.", messages.SUCCESS)
            return self._to_list(entity)
        if action == GraphEntityRule.Action.RENAME:
            rule = curation.rename_entity(entity, data["label"])
            self.message_user(request, f"{entity.label} is now {rule.label}.", messages.SUCCESS)
            return self._to_entity(entity, rule.target)
        into = selectors.entity_named(entity, normalize(data["into"]).strip())
        if into is None:
            raise DomainError(f"no entity named {data['into']!r} in this version")
        curation.merge_entity(entity, into)
        self.message_user(request, f"{entity.label} was merged into {into.label}.", messages.SUCCESS)
        return self._to_entity(entity, into.name)

    def _to_list(self, entity: BrowsedEntity) -> HttpResponseRedirect:
        url = reverse("admin:knowledge_graphentity_changelist") + f"?version={entity.kb_version_id}"
        return HttpResponseRedirect(url)

    def _to_entity(self, entity: BrowsedEntity, name: str) -> HttpResponseRedirect:
        found = selectors.entity_named(entity, name)
        return HttpResponseRedirect(entity_url(found.pk, found.kb_version_id)) if found else self._to_list(entity)

    def neighbours(self, entity: BrowsedEntity) -> SafeString | str:
        rows = selectors.entity_neighbours(entity)
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> · weight {} · {} passage(s){}',
            (
                (entity_url(row["entity_id"], entity.kb_version_id), row["label"], f"{row['weight']:.2f}",
                 row["passages"], f" · {', '.join(row['kinds']) or 'co_occurs'}")
                for row in rows
            ),
        ) or "-"  # fmt: skip


@admin.register(GraphEntityRule)
class GraphEntityRuleAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[GraphEntityRule]):
    """The curators' edits of each KB's graph, applied by every extraction (made on an entity's curate page)."""

    list_display = ["name", "action", "target", "label", "knowledge_base", "tenant", "updated_at"]
    list_filter = ["tenant", "action"]
    search_fields = ["name", "target", "label"]
    list_select_related = ["tenant", "knowledge_base"]
    ordering = ["-updated_at"]


@admin.register(GraphCommunity)
class GraphCommunityAdmin(GraphBrowserAdmin):
    """A version's communities with their summaries, key entities and supporting passages. A community's
    page is ``<level>-<number>/change/?version=``: the stores number communities per version and level."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return self._answer(request, lambda: self._communities(request))

    def _communities(self, request: HttpRequest) -> HttpResponse:
        versions, version = self._version(request)
        level = request.GET.get("level__exact", "")
        communities = selectors.version_communities(version, int(level) if level.isdigit() else None) if version else []
        return self._page(request, "admin/graph/communities.html", {
            "title": "Graph communities", "versions": versions, "version": version, "level": level,
            "rows": [(c, _community_name(c.level, c.number, c.key_entities), self._url(version, c.level, c.number))
                     for c in communities] if version else [],
        })  # fmt: skip

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._answer(request, lambda: self._community_page(request, object_id))

    def _community_page(self, request: HttpRequest, object_id: str) -> HttpResponse:
        _, version = self._version(request)
        level, _, number = object_id.partition("-")
        found = (
            selectors.find_community(version, int(level), int(number))
            if version and level.isdigit() and number.isdigit()
            else None
        )
        if version is None or found is None:
            raise Http404("no such community")
        return self._page(request, "admin/graph/community.html", {
            "title": _community_name(found.level, found.number, found.key_entities), "community": found,
            "version": version,
            "parent": self._url(version, found.level + 1, found.parent) if found.parent is not None else "",
            "passages": _passage_list((chunk, "") for chunk in selectors.community_chunks(version, found)),
        })  # fmt: skip

    def _url(self, version: KnowledgeBaseVersion, level: int, number: int) -> str:
        return reverse("admin:knowledge_graphcommunity_change", args=[f"{level}-{number}"]) + f"?version={version.pk}"


def _community_name(level: int, number: int, key_entities: Iterable[str]) -> str:
    """As ``GraphCommunity.__str__`` names one."""
    return f"L{level} #{number}: {', '.join(list(key_entities)[:3])}"


def _passage_list(rows: Iterable[tuple[Chunk, str]]) -> SafeString | str:
    return format_html_join(
        mark_safe("<br>"),
        '<a href="{}">{}</a> #{} {}: {}',
        (
            (reverse("admin:knowledge_chunk_change", args=[chunk.pk]), chunk.document.title, chunk.ordinal, note,
             chunk.content[:160])
            for chunk, note in rows
        ),
    ) or "-"  # fmt: skip
