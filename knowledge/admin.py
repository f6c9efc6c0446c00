"""The knowledge console. Writes go through the knowledge write modules, so versions, chunks, lexical indexes
and cached answers follow every change; what only a rebuild may change is read-only here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import InlineModelAdmin
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, re_path
from django_celery_beat.validators import crontab_validator

from core.admin import ConflictsAnsweredAdmin, ReadOnlyAdminMixin
from core.names import form_name
from engines.embedders import EmbeddingError, get_embedder
from knowledge import (
    console,
    vocabulary_admin,  # noqa: F401 - registers the vocabulary pages
)
from knowledge.acls import set_default_acl
from knowledge.chunking import DEFAULT_CHILD_TOKENS, DEFAULT_PARENT_TOKENS
from knowledge.documents import delete_document, update_document_labels
from knowledge.errors import InvalidChunking, InvalidSourcePath
from knowledge.knowledge_bases import create_knowledge_base, delete_knowledge_base, delete_tenant
from knowledge.models import (
    PLAIN,
    Chunk,
    Document,
    GraphCommunity,
    GraphEntity,
    KnowledgeBase,
    KnowledgeBaseVersion,
    KnowledgeSource,
    SourceRun,
)
from knowledge.parsing import parse_report_summary
from knowledge.search_settings import clean_search_settings
from knowledge.selectors.api import latest_runs, source_schedule
from knowledge.sources import checked_folder, create_source, delete_source, queue_sync, update_source
from knowledge.versions import check_chunking
from knowledge.views import ID_PATTERN
from tenants.admin import TenantAdmin
from tenants.models import Tenant

# The mixins below extend a ModelAdmin: typed as one, they are plain classes at run time.
if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldGroups  # stub-only aliases
    from django.utils.datastructures import _ListOrTuple

    _AdminMixin = admin.ModelAdmin[Any]
else:
    _AdminMixin = object


class VersionInline(admin.TabularInline[KnowledgeBaseVersion, KnowledgeBase]):
    model = KnowledgeBaseVersion
    extra = 0
    # a version's search settings are measured: manage.py evaluate --sweep --write
    readonly_fields = [
        "number", "status", "embedding_model", "embedding_dim", "analyzer_version", "graph_extractor", "revision",
        "search_settings", "created_at",
    ]  # fmt: skip
    fields = [*readonly_fields]
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # versions are made by the services (creation, rebuilds)


class ChunksGoWithTheirDocuments(_AdminMixin):
    """For admins whose deletes take chunks (and the graph made of them) along through a service: the
    read-only chunk, entity and community admins refuse to delete one alone, which must not refuse
    deleting its document, knowledge base or tenant."""

    def get_deleted_objects(
        self, objs: Sequence[Any] | QuerySet[Any], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        made_from_documents = {model._meta.verbose_name for model in (Chunk, GraphEntity, GraphCommunity)}
        return deleted, counts, perms_needed - made_from_documents, protected


class MadeAndDeletedByServices(_AdminMixin):
    """For admins whose add form's ``create()`` makes the object through a service (which saves all it
    has, so no inline follows an add) and whose deletes go through ``delete_with_service``."""

    delete_with_service: Any  # the service that deletes one object (a static method of the admin)

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        return super().save_form(request, form, change) if change else form.create()

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        if change:
            super().save_related(request, form, formsets, change)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.delete_with_service(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_with_service(obj)


class KnowledgeBaseCreationForm(forms.ModelForm[KnowledgeBase]):
    """The arguments of ``create_knowledge_base``; a blank one takes the service's default."""

    class Meta:
        model = KnowledgeBase
        fields = [
            "tenant", "name", "description", "embedding_model", "chunking", "chunk_size", "chunk_overlap",
            "parent_chunk_size", "languages",
        ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        defaults = {
            "embedding_model": f"Blank: {settings.EMBEDDING_MODEL}. A model folder, or remote:<name>.",
            "chunk_size": f"Tokens per chunk. Blank: {settings.CHUNK_SIZE_TOKENS}; never above the model's limit.",
            "chunk_overlap": f"Blank: {settings.CHUNK_OVERLAP_TOKENS}; at most half the chunk size.",
            "chunking": "plain: chunks are searched and returned; parent_child: small children are searched and a hit "
            f"returns their parent passage (chunk size is then the children's, blank: {DEFAULT_CHILD_TOKENS}).",
            "parent_chunk_size": f"parent_child only: a parent passage's largest size in tokens. Blank: "
            f"{DEFAULT_PARENT_TOKENS}.",
            "languages": "Comma-separated, e.g. zh,en. Blank: the languages known for the model.",
        }
        for name, help_text in defaults.items():
            self.fields[name].required = False
            self.fields[name].help_text = help_text

    def clean_name(self) -> str:
        return form_name(self.cleaned_data["name"])

    def clean_embedding_model(self) -> str:
        name: str = self.cleaned_data["embedding_model"].strip()
        try:
            get_embedder(name or None)
        except EmbeddingError as exc:
            raise ValidationError(str(exc)) from None
        return name

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        try:
            check_chunking(data.get("chunking") or PLAIN, data.get("chunk_size"), data.get("parent_chunk_size"))
        except InvalidChunking as exc:
            raise ValidationError({"parent_chunk_size": exc.message}) from None
        return data

    def create(self) -> KnowledgeBase:
        data = self.cleaned_data
        return create_knowledge_base(
            tenant=data["tenant"],
            name=data["name"],
            description=data["description"],
            embedding_model=data["embedding_model"] or None,
            chunk_size=data["chunk_size"],
            chunk_overlap=data["chunk_overlap"],
            chunking=data["chunking"] or PLAIN,
            parent_chunk_size=data["parent_chunk_size"],
            languages=data["languages"] or None,
        )


class KnowledgeBaseChangeForm(forms.ModelForm[KnowledgeBase]):
    # The search settings' one switch, as a checkbox beside their JSON (which then leaves it out).
    semantic_cache = forms.BooleanField(
        required=False,
        label="Semantic cache",
        help_text="Answer a query close enough to a cached one (same options, numbers, codes, dates and protected "
        "terms; cosine at least SEMANTIC_CACHE_MIN_COSINE) from the cache. Dense and hybrid searches only.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "default_acl" in self.fields:  # blank keeps it: a KB's default names at least one principal
            self.fields["default_acl"].required = False
        stored = dict(self.instance.search_settings or {})
        self.fields["semantic_cache"].initial = bool(stored.pop("semantic_cache", False))
        self.initial["search_settings"] = stored

    def clean_default_acl(self) -> list[str]:
        return self.cleaned_data.get("default_acl") or list(self.instance.default_acl)

    def clean_search_settings(self) -> dict[str, Any]:
        try:
            return clean_search_settings(self.cleaned_data["search_settings"])
        except ValidationError as exc:
            raise ValidationError(exc.messages) from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if isinstance(data.get("search_settings"), dict):  # it validated: the checkbox's value goes in
            search_settings = {k: v for k, v in data["search_settings"].items() if k != "semantic_cache"}
            data["search_settings"] = {
                **search_settings,
                **({"semantic_cache": True} if data["semantic_cache"] else {}),
            }
        return data

    def clean_name(self) -> str:
        # The tenant is read-only here, so Django skips the (tenant, name) constraint: check it.
        name: str = self.cleaned_data["name"]
        taken = KnowledgeBase.objects.filter(tenant_id=self.instance.tenant_id, name=name).exclude(pk=self.instance.pk)
        if taken.exists():
            raise ValidationError("This tenant already has a knowledge base with this name.")
        return name


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(ChunksGoWithTheirDocuments, MadeAndDeletedByServices, ConflictsAnsweredAdmin):
    list_display = [
        "name", "tenant", "embedding_model", "embedding_dim", "chunking", "chunk_size", "active_version", "created_at",
    ]  # fmt: skip
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__name"]
    form = KnowledgeBaseChangeForm
    add_form = KnowledgeBaseCreationForm
    # The tenant is copied onto every row of the KB; model, dimension, chunking and the model's
    # languages describe how its version was built: changing them is a rebuild, not an edit.
    fixed_after_creation = [
        "tenant", "embedding_model", "embedding_dim", "chunking", "chunk_size", "chunk_overlap", "parent_chunk_size",
        "languages", "active_version",
        "created_at",
    ]  # fmt: skip

    def get_urls(self) -> list[URLPattern]:
        view, name = self.admin_site.admin_view, "knowledge_knowledgebase"
        return [
            path("glance/", view(self.glance_view), name=f"{name}_glance"),
            re_path(rf"^(?P<kb_id>{ID_PATTERN})/lifecycle/$", view(self.lifecycle_view), name=f"{name}_lifecycle"),
            path("tasks/<str:task_id>/", view(console.task_view), name=f"{name}_task"),
            *super().get_urls(),
        ]

    def glance_view(self, request: HttpRequest) -> HttpResponse:
        title = "Knowledge bases at a glance"
        return console.glance_view(
            request, {**self.admin_site.each_context(request), "opts": self.opts, "title": title}
        )

    def lifecycle_view(self, request: HttpRequest, kb_id: str) -> HttpResponse:
        context = {**self.admin_site.each_context(request), "opts": self.opts}
        return console.knowledge_base_view(request, context, model_admin=self, kb_id=int(kb_id))

    def get_form(
        self, request: HttpRequest, obj: KnowledgeBase | None = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[KnowledgeBase]]:
        if obj is None:
            kwargs["form"] = self.add_form
        return super().get_form(request, obj, change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: KnowledgeBase | None = None) -> _FieldGroups:
        editable = ["name", "description", "default_acl", "search_settings", "semantic_cache"]
        return [*self.add_form.Meta.fields] if obj is None else [*editable, *self.fixed_after_creation]

    def get_readonly_fields(self, request: HttpRequest, obj: KnowledgeBase | None = None) -> list[str]:
        return [] if obj is None else self.fixed_after_creation

    def get_inlines(self, request: HttpRequest, obj: KnowledgeBase | None) -> list[type[InlineModelAdmin[Any, Any]]]:
        return [] if obj is None else [VersionInline]

    # A new KB is made by the service (its first version, sized for its model), not by the form.
    delete_with_service = staticmethod(delete_knowledge_base)

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form: Any, change: bool) -> None:
        if change:  # name, description and search settings; an added KB was saved by save_form
            default_acl = obj.default_acl
            if "default_acl" in form.changed_data:
                obj.default_acl = KnowledgeBase.objects.get(pk=obj.pk).default_acl  # set below, on its chunks too
            super().save_model(request, obj, form, change)
            if "default_acl" in form.changed_data:
                set_default_acl(obj, default_acl)


class DocumentForm(forms.ModelForm[Document]):
    def clean_metadata(self) -> dict[str, Any]:
        metadata = self.cleaned_data["metadata"]
        if not isinstance(metadata, dict):
            raise ValidationError("Metadata must be a JSON object.")
        return metadata


@admin.register(Document)
class DocumentAdmin(ChunksGoWithTheirDocuments, ConflictsAnsweredAdmin):
    """Documents come from ingestion; here their labels change (on every chunk) or they are deleted."""

    ordering = ["knowledge_base", "source_uri"]
    list_display = ["source_uri", "title", "knowledge_base", "doc_type", "status", "chunk_count", "updated_at"]
    list_filter = ["status", "doc_type", "knowledge_base__tenant", "knowledge_base"]
    search_fields = ["source_uri", "title"]
    form = DocumentForm
    actions = ["reingest"]
    readonly_fields = [
        "knowledge_base", "tenant", "source_uri", "doc_type", "status", "error", "content_md5", "chunker_version",
        "chunk_count", "parse_summary", "created_at", "updated_at",
    ]  # fmt: skip
    fields = ["title", "tags", "metadata", "acl", *readonly_fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="What was read")
    def parse_summary(self, obj: Document) -> str:
        """The last parse report in words: counts that are not 0, then each warning."""
        return parse_report_summary(obj.parse_report)

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        labels = form.cleaned_data
        update_document_labels(
            obj, title=labels["title"], tags=labels["tags"], metadata=labels["metadata"], acl=labels["acl"]
        )

    def delete_model(self, request: HttpRequest, obj: Document) -> None:
        delete_document(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        for document in queryset:
            delete_document(document)

    @admin.action(description="Re-ingest selected documents from their stored files", permissions=["change"])
    def reingest(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        by_kb: dict[KnowledgeBase, list[Document]] = {}
        for document in queryset.select_related("knowledge_base"):
            by_kb.setdefault(document.knowledge_base, []).append(document)
        for kb, documents in by_kb.items():
            console.report_reingest(request, kb, documents)


class SourceRunInline(admin.TabularInline[SourceRun, KnowledgeSource]):
    """A source's syncs, the newest first (each sync keeps the latest ``RUNS_KEPT``)."""

    model = SourceRun
    extra = 0
    readonly_fields = [
        "started_at", "finished_at", "trigger", "status", "added", "replaced", "unchanged", "removed", "failed",
        "failures", "error",
    ]  # fmt: skip
    fields = [*readonly_fields]
    can_delete = False
    ordering = ["-started_at", "-id"]

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # runs are recorded by the syncs


class KnowledgeSourceForm(forms.ModelForm):  # type: ignore[type-arg]  # its unsaved instance's pk is None, which the stubs type as int
    """The arguments of ``create_source``; afterwards those of ``update_source`` (a URL source's list,
    the schedule, paused or not)."""

    interval_seconds = forms.IntegerField(required=False, min_value=10, help_text="Sync every this many seconds,")
    crontab = forms.CharField(
        required=False, validators=[crontab_validator], help_text='or on this crontab (UTC), e.g. "*/15 * * * *".'
    )
    enabled = forms.BooleanField(required=False, help_text="Unticked: the scheduled syncs are paused.")

    class Meta:
        model = KnowledgeSource
        fields = ["knowledge_base", "kind", "path", "urls"]
        help_texts = {
            "path": "Folder sources: under KNOWLEDGE_SOURCE_ROOTS (a relative path is taken from the first root).",
            "urls": "URL sources: comma-separated http(s) URLs.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial.update(source_schedule(self.instance))
            self.initial["enabled"] = self.instance.periodic_task is None or self.instance.periodic_task.enabled

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if bool(data.get("interval_seconds")) == bool(data.get("crontab")):
            raise ValidationError("Give an interval or a crontab (one of them).")
        if self.instance.pk is None:
            folder = data.get("kind") == KnowledgeSource.Kind.FOLDER
            if folder and not data.get("path"):
                raise ValidationError({"path": "A folder source needs a path."})
            if folder:
                try:
                    checked_folder(data["path"])
                except InvalidSourcePath as exc:
                    raise ValidationError({"path": exc.message}) from None
            if not folder and not data.get("urls"):
                raise ValidationError({"urls": "A URL source needs URLs."})
        elif self.instance.kind == KnowledgeSource.Kind.URLS and "urls" in data and not data["urls"]:
            raise ValidationError({"urls": "A URL source needs URLs (delete the source to stop syncing)."})
        return data

    def schedule(self) -> dict[str, Any]:
        return {
            "interval_seconds": self.cleaned_data.get("interval_seconds"),
            "crontab": self.cleaned_data.get("crontab"),
        }

    def create(self) -> KnowledgeSource:
        data = self.cleaned_data
        return create_source(
            data["knowledge_base"],
            kind=data["kind"],
            path=data.get("path", ""),
            urls=data.get("urls"),
            **self.schedule(),
        )


@admin.register(KnowledgeSource)
class KnowledgeSourceAdmin(MadeAndDeletedByServices, ConflictsAnsweredAdmin):
    """Folders and URL lists kept in sync by beat: their schedule, last runs, and a "sync now" action
    (the same task as ``POST .../sources/{id}/sync``)."""

    form = KnowledgeSourceForm
    list_display = ["__str__", "knowledge_base", "kind", "schedule", "last_run"]
    list_filter = ["kind", "knowledge_base__tenant"]
    list_select_related = ["knowledge_base__tenant", "periodic_task__interval", "periodic_task__crontab"]
    inlines = [SourceRunInline]
    actions = ["sync_now"]
    fixed_after_creation = ["knowledge_base", "kind", "path", "urls", "created_at"]

    def get_fields(self, request: HttpRequest, obj: KnowledgeSource | None = None) -> _FieldGroups:
        schedule = ["interval_seconds", "crontab"]
        return (
            [*self.form.Meta.fields, *schedule] if obj is None else [*self.fixed_after_creation, *schedule, "enabled"]
        )

    def get_readonly_fields(self, request: HttpRequest, obj: KnowledgeSource | None = None) -> list[str]:
        if obj is None:
            return []
        editable = ["urls"] if obj.kind == KnowledgeSource.Kind.URLS else []
        return [name for name in self.fixed_after_creation if name not in editable]

    def get_inlines(
        self, request: HttpRequest, obj: KnowledgeSource | None
    ) -> _ListOrTuple[type[InlineModelAdmin[Any, Any]]]:
        return [] if obj is None else self.inlines

    @admin.display(description="schedule")
    def schedule(self, source: KnowledgeSource) -> str:
        schedule = source_schedule(source)
        return (
            f"every {schedule['interval_seconds']} s" if "interval_seconds" in schedule else schedule.get("crontab", "")
        )

    @admin.display(description="last run")
    def last_run(self, source: KnowledgeSource) -> str:
        runs = latest_runs(source, 1)
        if not runs:
            return "never"
        run = runs[0]
        counts = f"+{run.added} ~{run.replaced} ={run.unchanged} -{run.removed} !{run.failed}"
        return f"{run.started_at:%Y-%m-%d %H:%M:%S} {run.status} ({counts})"

    # A new source is made by the service (with its beat entry), not by the form.
    delete_with_service = staticmethod(delete_source)

    def save_model(self, request: HttpRequest, obj: KnowledgeSource, form: Any, change: bool) -> None:
        if change:  # an added source was saved by save_form
            urls = form.cleaned_data["urls"] if "urls" in form.changed_data else None
            update_source(obj, urls=urls, enabled=form.cleaned_data["enabled"], **form.schedule())

    @admin.action(description="Sync selected sources now", permissions=["change"])
    def sync_now(self, request: HttpRequest, queryset: QuerySet[KnowledgeSource]) -> None:
        for source in queryset:
            queue_sync(source)
        self.message_user(
            request, f"{queryset.count()} sync(s) queued; their runs appear on each source.", messages.SUCCESS
        )


@admin.register(Chunk)
class ChunkAdmin(ReadOnlyAdminMixin, admin.ModelAdmin[Chunk]):
    """Read-only: a chunk's text, vector and index entry come from its document. Edit the document's
    labels, re-ingest its file, or delete the document."""

    ordering = ["document", "ordinal"]
    list_display = ["id", "document", "ordinal", "token_count", "doc_type"]
    list_filter = ["doc_type", "knowledge_base"]
    search_fields = ["content"]
    exclude = ["embedding"]
    list_select_related = ["document"]


admin.site.unregister(Tenant)


@admin.register(Tenant)
class TenantWithKnowledgeAdmin(ChunksGoWithTheirDocuments, TenantAdmin):
    """The tenants console, deleting a tenant's knowledge through the services (``tenants`` may not
    import ``knowledge``, so the knowledge app extends it)."""

    def delete_model(self, request: HttpRequest, obj: Tenant) -> None:
        delete_tenant(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        for tenant in queryset:
            delete_tenant(tenant)


from knowledge import chunk_admin  # noqa: E402, F401  (registers the chunk edits' record)
