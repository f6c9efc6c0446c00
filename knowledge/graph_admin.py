"""The graph browsers of the knowledge console. Ingestion and the communities task write the graph; a
curator merges, renames or deletes an entity on its curate page, through ``knowledge.graph_curation``
(the edit is kept as a rule that every later extraction applies)."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import re_path, reverse
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from core.admin import ReadOnlyAdminMixin
from core.errors import DomainError
from engines.analysis import normalize
from knowledge import graph_curation
from knowledge.models import GraphCommunity, GraphEntity, GraphEntityRule
from knowledge.selectors import graph_pages
from knowledge.views import ID_PATTERN
from tenants.selectors import tenants_visible_to

CURATE_PERMISSION = "knowledge.add_graphentityrule"


class CurateForm(forms.Form):
    action = forms.ChoiceField(choices=GraphEntityRule.Action.choices)
    label = forms.CharField(required=False, max_length=200, help_text="rename: the new name")
    into = forms.CharField(required=False, max_length=200, help_text="merge: the name of the entity it goes into")


@admin.register(GraphEntity)
class GraphEntityAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Search an entity; its page lists the passages mentioning it and its neighbours, all within its
    own tenant and KB version. (With ``NEO4J_URL`` the graph lives in Neo4j: browse it there.)"""

    list_display = ["label", "name", "kind", "chunk_count", "tenant", "kb_version"]
    change_form_template = "admin/knowledge/graphentity/change_form.html"
    list_filter = ["tenant", "kind"]
    search_fields = ["name", "label"]
    list_select_related = ["tenant", "kb_version__knowledge_base"]
    ordering = ["-chunk_count", "id"]
    fields = ["label", "name", "kind", "chunk_count", "tenant", "kb_version", "neighbours", "passages"]
    readonly_fields = fields

    def get_urls(self):
        curate = self.admin_site.admin_view(self.curate_view)
        return [
            re_path(rf"^(?P<entity_id>{ID_PATTERN})/curate/$", curate, name="knowledge_graphentity_curate"),
            *super().get_urls(),
        ]

    def curate_view(self, request, entity_id: str):
        """Merge, rename or delete an entity (its tenant must be one the user may see)."""
        if not request.user.has_perm(CURATE_PERMISSION):
            raise PermissionDenied
        entity = (
            GraphEntity.objects.filter(pk=int(entity_id), tenant__in=tenants_visible_to(request.user))
            .select_related("tenant", "kb_version__knowledge_base").first()
        )  # fmt: skip
        if entity is None:
            raise Http404("no such entity")
        form = CurateForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                return self._curate(request, entity, form.cleaned_data)
            except DomainError as exc:
                form.add_error(None, str(exc))
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "title": f"Curate {entity.label}",
            "entity": entity, "form": form, "neighbours": graph_pages.entity_neighbours(entity),
            "rules": GraphEntityRule.objects.filter(knowledge_base_id=entity.kb_version.knowledge_base_id)
            .order_by("-updated_at")[:50],
        }  # fmt: skip
        return TemplateResponse(request, "admin/knowledge/graphentity/curate.html", context)

    def _curate(self, request, entity: GraphEntity, data: dict):
        action = data["action"]
        if action == GraphEntityRule.Action.DELETE:
            graph_curation.delete_entity(entity)
            self.message_user(request, f"{entity.label} was deleted; later ingestions keep it out.", messages.SUCCESS)
            return redirect("admin:knowledge_graphentity_changelist")
        if action == GraphEntityRule.Action.RENAME:
            rule = graph_curation.rename_entity(entity, data["label"])
            self.message_user(request, f"{entity.label} is now {rule.label}.", messages.SUCCESS)
            return self._to_entity(entity, rule.target)
        into = GraphEntity.objects.filter(
            tenant_id=entity.tenant_id, kb_version_id=entity.kb_version_id, name=normalize(data["into"]).strip()
        ).first()
        if into is None:
            raise DomainError(f"no entity named {data['into']!r} in this version")
        graph_curation.merge_entity(entity, into)
        self.message_user(request, f"{entity.label} was merged into {into.label}.", messages.SUCCESS)
        return self._to_entity(entity, into.name)

    def _to_entity(self, entity: GraphEntity, name: str):
        found = GraphEntity.objects.filter(kb_version_id=entity.kb_version_id, name=name).values_list("pk", flat=True)
        if not found:
            return redirect("admin:knowledge_graphentity_changelist")
        return redirect("admin:knowledge_graphentity_change", found[0])

    @admin.display(description="neighbours (strongest first)")
    def neighbours(self, entity: GraphEntity) -> str:
        rows = graph_pages.entity_neighbours(entity)
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> · weight {} · {} passage(s){}',
            (
                (reverse("admin:knowledge_graphentity_change", args=[row["entity_id"]]), row["label"],
                 f"{row['weight']:.2f}", row["passages"], f" · {', '.join(row['kinds']) or 'co_occurs'}")
                for row in rows
            ),
        ) or "-"  # fmt: skip

    @admin.display(description="passages mentioning it")
    def passages(self, entity: GraphEntity) -> str:
        return _passage_list((mention.chunk, f"× {mention.count}") for mention in graph_pages.entity_mentions(entity))


@admin.register(GraphEntityRule)
class GraphEntityRuleAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The curators' edits of each KB's graph, applied by every extraction (made on an entity's curate page)."""

    list_display = ["name", "action", "target", "label", "knowledge_base", "tenant", "updated_at"]
    list_filter = ["tenant", "action"]
    search_fields = ["name", "target", "label"]
    list_select_related = ["tenant", "knowledge_base"]
    ordering = ["-updated_at"]


@admin.register(GraphCommunity)
class GraphCommunityAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The communities of each KB version with their summaries, key entities and supporting passages."""

    list_display = ["__str__", "level", "number", "parent", "size", "tenant", "kb_version"]
    list_filter = ["tenant", "level"]
    search_fields = ["summary"]
    list_select_related = ["tenant", "kb_version__knowledge_base"]
    ordering = ["kb_version", "level", "number"]
    fields = ["tenant", "kb_version", "level", "number", "parent", "size", "key_entities", "summary", "passages"]
    readonly_fields = fields

    @admin.display(description="entities")
    def size(self, community: GraphCommunity) -> int:
        return len(community.entity_ids)

    @admin.display(description="supporting passages")
    def passages(self, community: GraphCommunity) -> str:
        return _passage_list((chunk, "") for chunk in graph_pages.community_chunks(community))


def _passage_list(rows) -> str:
    return format_html_join(
        mark_safe("<br>"),
        '<a href="{}">{}</a> #{} {}: {}',
        (
            (reverse("admin:knowledge_chunk_change", args=[chunk.pk]), chunk.document.title, chunk.ordinal, note,
             chunk.content[:160])
            for chunk, note in rows
        ),
    ) or "-"  # fmt: skip
