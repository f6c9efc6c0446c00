"""The graph browsers of the knowledge console: read-only, since ingestion and the communities task write
the graph."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from core.admin import ReadOnlyAdminMixin
from knowledge import selectors
from knowledge.models import GraphCommunity, GraphEntity


@admin.register(GraphEntity)
class GraphEntityAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Search an entity; its page lists the passages mentioning it and its neighbours, all within its
    own tenant and KB version. (With ``NEO4J_URL`` the graph lives in Neo4j: browse it there.)"""

    list_display = ["label", "name", "kind", "chunk_count", "tenant", "kb_version"]
    list_filter = ["tenant", "kind"]
    search_fields = ["name", "label"]
    list_select_related = ["tenant", "kb_version__knowledge_base"]
    ordering = ["-chunk_count", "id"]
    fields = ["label", "name", "kind", "chunk_count", "tenant", "kb_version", "neighbours", "passages"]
    readonly_fields = fields

    @admin.display(description="neighbours (strongest first)")
    def neighbours(self, entity: GraphEntity) -> str:
        rows = selectors.entity_neighbours(entity)
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> · weight {} · {} passage(s){}',
            (
                (reverse("admin:knowledge_graphentity_change", args=[row["entity_id"]]), row["label"],
                 f"{row['weight']:.2f}", row["passages"], f" · {', '.join(row['kinds'])}" if row["kinds"] else "")
                for row in rows
            ),
        ) or "-"  # fmt: skip

    @admin.display(description="passages mentioning it")
    def passages(self, entity: GraphEntity) -> str:
        return _passage_list((mention.chunk, f"× {mention.count}") for mention in selectors.entity_mentions(entity))


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
        return _passage_list((chunk, "") for chunk in selectors.community_chunks(community))


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
