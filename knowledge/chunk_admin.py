"""The console's record of curators' chunk edits: who changed which chunk of which document, when, from
what text to what, and which edits a changed file left for review (``needs_review``). The edits are made
through ``/api/v1/knowledge-bases/{id}/documents/{doc_id}/chunks`` (``knowledge.chunk_curation``)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdminMixin
from knowledge.models import ChunkEdit


@admin.register(ChunkEdit)
class ChunkEditAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: an edit is applied to every store by the chunk API, never by saving a row here."""

    ordering = ["-edited_at"]
    list_display = ["document", "chunk_id", "kind", "enabled", "needs_review", "edited_by", "edited_at"]
    list_filter = ["needs_review", "enabled", "manual", "document__knowledge_base"]
    search_fields = ["content", "original_content", "document__source_uri", "edited_by"]
    list_select_related = ["document"]
    readonly_fields = [
        "document", "chunk_id", "manual", "enabled", "needs_review", "original_content", "content", "ordinal",
        "metadata", "edited_by", "edited_at",
    ]  # fmt: skip

    @admin.display(description="change")
    def kind(self, obj: ChunkEdit) -> str:
        if obj.manual:
            return "added"
        return "edited" if obj.content != obj.original_content else "disabled" if not obj.enabled else "unchanged"
