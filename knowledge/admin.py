from django.contrib import admin

from knowledge.models import Chunk, DictionaryTerm, Document, KnowledgeBase, KnowledgeBaseVersion, Synonym
from knowledge.services import delete_document


class VersionInline(admin.TabularInline):
    model = KnowledgeBaseVersion
    extra = 0
    fields = ["number", "status", "embedding_model", "embedding_dim", "analyzer_version", "revision", "created_at"]
    readonly_fields = fields
    can_delete = False


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "embedding_model", "embedding_dim", "chunk_size", "active_version", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__name"]
    readonly_fields = ["embedding_model", "embedding_dim", "active_version", "created_at"]
    inlines = [VersionInline]


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    ordering = ["knowledge_base", "source_uri"]
    list_display = ["source_uri", "title", "knowledge_base", "doc_type", "status", "chunk_count", "updated_at"]
    list_filter = ["status", "doc_type", "knowledge_base__tenant", "knowledge_base"]
    search_fields = ["source_uri", "title"]
    readonly_fields = ["content_md5", "chunk_count", "created_at", "updated_at", "error"]

    def delete_model(self, request, obj):
        delete_document(obj)

    def delete_queryset(self, request, queryset):
        for document in queryset:
            delete_document(document)


@admin.register(Chunk)
class ChunkAdmin(admin.ModelAdmin):
    ordering = ["document", "ordinal"]
    list_display = ["id", "document", "ordinal", "token_count", "doc_type"]
    list_filter = ["doc_type", "knowledge_base"]
    search_fields = ["content"]
    exclude = ["embedding"]
    readonly_fields = ["document", "kb_version", "tenant", "knowledge_base", "content_hash", "token_count", "embedding_dim"]
    list_select_related = ["document"]


@admin.register(DictionaryTerm)
class DictionaryTermAdmin(admin.ModelAdmin):
    """Protected terms change tokenization: rebuild the keyword index afterwards
    (``manage.py rebuild_lexical_index``); searches say so until then."""

    list_display = ["value", "kind", "tenant", "note", "created_at"]
    list_filter = ["kind", "tenant"]
    search_fields = ["value", "note"]


@admin.register(Synonym)
class SynonymAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "weight", "is_active", "tenant"]
    list_filter = ["kind", "is_active", "tenant"]
    search_fields = ["terms", "replacements"]
