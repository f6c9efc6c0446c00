"""The console's chunk editor (a document's chunks in order: edit, disable, enable, add) and its record of
curators' chunk edits: who changed which chunk of which document, when, from what text to what, and which
edits a changed file left for review (``needs_review``). Both write through ``knowledge.chunk_curation``,
as the chunk API does."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from core.admin import ReadOnlyAdminMixin
from core.errors import DomainError
from knowledge.chunk_curation import add_chunk, edit_chunk
from knowledge.chunk_selectors import document_chunks
from knowledge.models import ChunkEdit, Document
from tenants.selectors import tenants_visible_to


def _editor(request: HttpRequest) -> str:
    return f"user {request.user.get_username()}"


def chunks_view(request: HttpRequest, context: dict[str, Any], document_id: int) -> HttpResponse:
    """GET: the document's chunks, each in a form. POST ``action`` ``save`` (``chunk``, ``content``,
    ``enabled``) or ``add`` (``content``), then back here with a message."""
    if not request.user.has_perm("knowledge.view_document"):
        raise PermissionDenied
    document = (
        Document.objects.filter(pk=document_id, tenant__in=tenants_visible_to(request.user))
        .select_related("knowledge_base__active_version", "tenant").first()
    )  # fmt: skip
    if document is None:
        raise Http404("no such document")
    can_change = request.user.has_perm("knowledge.change_document")
    if request.method == "POST":
        if not can_change:
            raise PermissionDenied
        try:
            if request.POST.get("action") == "add":
                add_chunk(document, request.POST.get("content", ""), editor=_editor(request))
                messages.success(request, "Chunk added; it is searchable now.")
            else:
                chunk_id = int(request.POST.get("chunk", "0") or 0)
                edit_chunk(
                    document, chunk_id, content=request.POST.get("content"),
                    enabled=request.POST.get("enabled") == "on", editor=_editor(request),
                )  # fmt: skip
                messages.success(request, f"Chunk {chunk_id} saved; every index has it now.")
        except (DomainError, ValueError) as exc:
            messages.error(request, str(exc))
        return redirect(request.path)
    context.update(
        document=document, title=f"Chunks of {document.source_uri}", can_change=can_change, **document_chunks(document)
    )
    return TemplateResponse(request, "admin/knowledge/chunks.html", context)


@admin.register(ChunkEdit)
class ChunkEditAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[ChunkEdit]):
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

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.chunks_view)
        return [path("document/<int:document_id>/", view, name="knowledge_chunkedit_document"), *super().get_urls()]

    def chunks_view(self, request: HttpRequest, document_id: int) -> HttpResponse:
        return chunks_view(request, {**self.admin_site.each_context(request), "opts": self.opts}, document_id)

    @admin.display(description="change")
    def kind(self, obj: ChunkEdit) -> str:
        if obj.manual:
            return "added"
        return "edited" if obj.content != obj.original_content else "disabled" if not obj.enabled else "unchanged"
