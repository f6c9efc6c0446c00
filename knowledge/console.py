"""The console's knowledge pages: the knowledge bases at a glance, one knowledge base's lifecycle
(uploads with their progress, versions built, activated, rolled back and retired, documents
re-ingested, all through the services the REST API calls), and the bulk import of synonyms and
protected terms (upload or paste, preview what changes and every line that cannot be used, then
apply). Registered as admin views by ``knowledge.admin``."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils import timezone

from core.errors import DomainError
from core.redis import REDIS_ERRORS
from engines.embedders import EmbeddingError
from knowledge.documents import check_upload_sizes, queue_uploads, reingest_documents
from knowledge.errors import InvalidChunking, VocabularyChanged
from knowledge.models import CHUNKINGS, Document, KnowledgeBase, KnowledgeBaseVersion, KnowledgeTask
from knowledge.parsing import SUPPORTED_SUFFIXES, parse_report_summary
from knowledge.selectors.api import documents_of, source_of, task_status, version_of, versions_of
from knowledge.selectors.console_pages import knowledge_bases_at_a_glance, recent_tasks_of
from knowledge.serializers import UploadInput
from knowledge.sources import queue_sync
from knowledge.stores import vector_rebuild_advice
from knowledge.versions import activate_version, retire_version, start_version_build
from knowledge.views import ID_PATTERN
from knowledge.vocabulary import FORMATS, apply_import, plan_import
from tenants.models import Tenant
from tenants.selectors import tenants_visible_to

MAX_IMPORT_BYTES = 2 * 1024 * 1024


class VocabularyImportForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), empty_label=None)
    format = forms.ChoiceField()
    file = forms.FileField(required=False, help_text="UTF-8; or paste the lines below")
    text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 10, "cols": 80}), label="Lines")

    def __init__(self, *args: Any, tenants: QuerySet[Tenant], formats: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast("forms.ModelChoiceField[Tenant]", self.fields["tenant"]).queryset = tenants
        cast(forms.ChoiceField, self.fields["format"]).choices = [(name, FORMATS[name]) for name in formats]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        upload = data.get("file")
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                raise forms.ValidationError(f"the file is larger than {MAX_IMPORT_BYTES // 1024} KiB")
            try:
                data["text"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("the file is not UTF-8 text") from None
        if not data.get("text", "").strip():
            raise forms.ValidationError("upload a file or paste some lines")
        return data


def import_view(
    request: HttpRequest, context: dict[str, Any], *, model_admin: admin.ModelAdmin[Any], formats: list[str]
) -> HttpResponse:
    """GET: the form. POST: the preview; POST with ``apply``: the import, when the preview has no errors."""
    if not (model_admin.has_add_permission(request) and model_admin.has_change_permission(request)):
        raise PermissionDenied
    tenants = tenants_visible_to(request.user)
    data = request.POST if request.method == "POST" else None
    form = VocabularyImportForm(data, request.FILES or None, tenants=tenants, formats=formats)
    plan = None
    if data is not None and form.is_valid():
        tenant, text = form.cleaned_data["tenant"], form.cleaned_data["text"]
        plan = plan_import(tenant, form.cleaned_data["format"], text)
        if "apply" in data and not plan.errors:
            try:
                apply_import(tenant, plan)
            except VocabularyChanged as changed:
                messages.error(request, changed.message)
                plan = plan_import(tenant, form.cleaned_data["format"], text)  # the preview as things are now
            else:
                messages.success(
                    request,
                    f"Imported for {tenant.name}: {len(plan.add)} added, {len(plan.update)} updated, "
                    f"{len(plan.unchanged)} unchanged.",
                )
                return redirect(f"admin:{context['opts'].app_label}_{context['opts'].model_name}_changelist")
        # The preview carries the lines (an uploaded file's too) to the apply step.
        form = VocabularyImportForm({**data.dict(), "text": text}, tenants=tenants, formats=formats)
    context.update(form=form, plan=plan, has_tenants=tenants.exists())
    return TemplateResponse(request, "admin/knowledge/import.html", context)


def glance_view(request: HttpRequest, context: dict[str, Any]) -> TemplateResponse:
    """Per knowledge base of the tenants the user sees: documents by status, chunks, the active
    version's model and chunking, versions in build with their progress, the latest failures."""
    glances = knowledge_bases_at_a_glance(tenants_visible_to(request.user))
    _with_status([task for glance in glances for _, task in glance.building if task is not None])
    context.update(glances=glances)
    return TemplateResponse(request, "admin/knowledge/glance.html", context)


# --- one knowledge base's lifecycle -----------------------------------------------------------------

DOCUMENTS_SHOWN = 100


class VersionBuildForm(forms.Form):
    """``POST /api/v1/knowledge-bases/{id}/versions``'s options; blank takes the active version's."""

    embedding_model = forms.CharField(required=False, max_length=255, help_text="blank: the active version's")
    chunk_size = forms.IntegerField(required=False, min_value=16, max_value=8192, help_text="tokens")
    chunk_overlap = forms.IntegerField(required=False, min_value=0, max_value=4096, help_text="tokens")
    chunking = forms.ChoiceField(
        required=False,
        choices=[("", "the active version's"), *CHUNKINGS],
        help_text="parent_child: chunk size is the searched children's, a hit returns their parent passage",
    )
    parent_chunk_size = forms.IntegerField(
        required=False, min_value=16, max_value=8192, help_text="tokens; parent_child only"
    )
    languages = forms.CharField(required=False, max_length=200, help_text="comma-separated, e.g. zh,en")
    activate = forms.ChoiceField(
        choices=[("manual", "manual: activate it here when ready"), ("auto", "auto: once it validates")],
        initial="manual",
    )

    def __init__(self, *args: Any, kb: KnowledgeBase, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        active = {**{name: getattr(kb, name) for name in ("embedding_model", "chunk_size", "chunk_overlap")},
                  "languages": ",".join(kb.languages)}  # fmt: skip
        for name, value in active.items():
            self.fields[name].widget.attrs["placeholder"] = value

    def clean_languages(self) -> str:
        codes = [code.strip() for code in self.cleaned_data["languages"].split(",") if code.strip()]
        if len(codes) > 20 or any(len(code) > 8 for code in codes):
            raise forms.ValidationError("at most 20 language codes of at most 8 characters each")
        return ",".join(codes)

    def build_options(self) -> dict[str, Any]:
        data = self.cleaned_data
        sizes = ("chunk_size", "chunk_overlap", "parent_chunk_size")
        options: dict[str, Any] = {name: data[name] for name in sizes if data[name] is not None}
        if data["chunking"]:
            options["chunking"] = data["chunking"]
        if data["embedding_model"].strip():
            options["embedding_model"] = data["embedding_model"].strip()
        if data["languages"]:
            options["languages"] = data["languages"].split(",")
        return options


def knowledge_base_view(
    request: HttpRequest, context: dict[str, Any], *, model_admin: admin.ModelAdmin[Any], kb_id: int
) -> HttpResponse:
    """GET: one KB's lifecycle page. POST ``action``: upload, build, activate, retire or reingest, then
    back here with a message (an upload sent by the page's script follows the same redirect)."""
    if not model_admin.has_view_or_change_permission(request):
        raise PermissionDenied
    kb = _visible_knowledge_base(request.user, kb_id)
    build_form = VersionBuildForm(kb=kb)
    if request.method == "POST":
        if not model_admin.has_change_permission(request):
            raise PermissionDenied
        action = request.POST.get("action")
        if action == "build":
            build_form = VersionBuildForm(request.POST, kb=kb)
            if build_form.is_valid() and _build(request, kb, build_form):
                return redirect(request.path)
        elif action in ACTIONS:
            ACTIONS[action](request, kb)
            if request.headers.get("X-Requested-With") == "XMLHttpRequest":  # the upload's script goes there itself
                return JsonResponse({"location": request.path})
            return redirect(request.path)
        else:
            messages.error(request, f"Unknown action: {action!r}.")
            return redirect(request.path)
    (glance,) = knowledge_bases_at_a_glance(Tenant.objects.filter(pk=kb.tenant_id), only=kb.pk)
    tasks = _with_status(recent_tasks_of(kb))
    _with_status([task for _, task in glance.building if task is not None])
    documents = documents_of(kb).order_by("-updated_at", "-id")
    shown = list(documents[:DOCUMENTS_SHOWN])
    for document in shown:  # what its last parse read, in words (the "Read" column)
        document.parse_summary = parse_report_summary(document.parse_report)
    context.update(
        kb=kb,
        glance=glance,
        versions=list(versions_of(kb)),
        title=f"{kb.name} ({kb.tenant.name})",
        tasks=tasks,
        documents=shown,
        document_count=documents.count(),
        build_form=build_form,
        can_change=model_admin.has_change_permission(request),
        suffixes=sorted(SUPPORTED_SUFFIXES),
        retention_days=settings.KB_VERSION_RETENTION_DAYS,
        # the HNSW index this KB searches, when built for fewer rows than it now holds (recall falls short)
        rebuild_advice=vector_rebuild_advice([kb.embedding_dim]),
    )
    return TemplateResponse(request, "admin/knowledge/knowledge_base.html", context)


def task_view(request: HttpRequest, task_id: str) -> JsonResponse:
    """``GET /api/v1/tasks/{id}``'s answer for the console's progress bars: a task of a tenant the user sees."""
    record = KnowledgeTask.objects.filter(task_id=task_id, tenant__in=tenants_visible_to(request.user)).first()
    if record is None:
        raise Http404("no such task")
    return JsonResponse(_status_of(record))


def _ids(values: list[str]) -> list[int]:
    """The values that are ids (bigints): anything else is left out, never a database error."""
    return [int(value) for value in values if re.fullmatch(ID_PATTERN, value)]


def _visible_knowledge_base(user: User | AnonymousUser, kb_id: int) -> KnowledgeBase:
    kb = (
        KnowledgeBase.objects.filter(pk=kb_id, tenant__in=tenants_visible_to(user))
        .select_related("tenant", "active_version").first()
    )  # fmt: skip
    if kb is None:
        raise Http404("no such knowledge base")
    return kb


def _status_of(task: KnowledgeTask) -> dict[str, Any]:
    """The task's status as ``task_status`` reads it, with ``finished``, ``percent`` done and its result
    in words (``summary``); state ``UNKNOWN`` while Redis (the result backend) cannot be read, ``EXPIRED``
    for a task older than its state is kept (``TASK_RESULT_TTL_S``: Celery then says PENDING forever)."""
    try:
        status = task_status(task.tenant, task.task_id)
    except REDIS_ERRORS:
        status = {"task_id": task.task_id, "kind": task.kind, "state": "UNKNOWN", "progress": None, "error": None}
    kept_since = timezone.now() - timedelta(seconds=settings.CELERY_RESULT_EXPIRES)
    if status["state"] == "PENDING" and task.created_at < kept_since:
        status["state"] = "EXPIRED"
    progress, ended = status["progress"], status["state"] in ("SUCCESS", "FAILURE")
    percent = 100 if ended else 100 * progress["done"] // progress["total"] if progress and progress["total"] else None
    summary = _summary(status.get("result") or {})
    return {**status, "finished": ended or status["state"] == "EXPIRED", "percent": percent, "summary": summary}


# A result's fields that are no count: ids and nested reports, worded or left out of the summary.
_RESULT_WORDS = {"communities_task": "graph communities rebuilt by a follow-up task"}
_RESULT_LEFT_OUT = {"failures", "progress"}


def _summary(result: dict[str, Any]) -> str:
    """A task's result in words: its counts (``added 3, unchanged 1``), never a raw id or nested dict."""
    parts = []
    for name, value in result.items():
        if name in _RESULT_LEFT_OUT or value in ("", None) or isinstance(value, (dict, list)):
            continue
        parts.append(_RESULT_WORDS.get(name) or f"{name.replace('_', ' ')} {value}")
    return ", ".join(parts)


def _with_status(tasks: list[KnowledgeTask]) -> list[KnowledgeTask]:
    for task in tasks:
        task.status = _status_of(task)  # read by the templates' progress bars
    return tasks


def _upload(request: HttpRequest, kb: KnowledgeBase) -> None:
    params = UploadInput(data={"files": request.FILES.getlist("files")})
    if not params.is_valid():
        messages.error(request, "; ".join(str(error) for errors in params.errors.values() for error in errors))
        return
    uploads = params.validated_data["files"]
    try:
        check_upload_sizes(uploads)
    except DomainError as exc:
        messages.error(request, str(exc))
        return
    task, documents = queue_uploads(kb, uploads, None)
    refused = [f"{document.source_uri}: {document.error}" for document in documents if document.status == "failed"]
    messages.success(request, f"Queued {len(documents) - len(refused)} file(s) for ingestion (task {task.task_id}).")
    if refused:
        messages.warning(request, "Not accepted: " + "; ".join(refused))


def _build(request: HttpRequest, kb: KnowledgeBase, form: VersionBuildForm) -> bool:
    try:
        version, task = start_version_build(
            kb, activate=form.cleaned_data["activate"] == "auto", **form.build_options()
        )
    except EmbeddingError as exc:
        form.add_error("embedding_model", str(exc))
        return False
    except InvalidChunking as exc:
        form.add_error("parent_chunk_size", exc.message)
        return False
    except DomainError as exc:
        messages.error(request, str(exc))
        return True
    messages.success(request, f"Building version {version.number} (task {task.task_id}).")
    return True


def _version_action(
    change: Callable[[KnowledgeBaseVersion], KnowledgeBaseVersion], done: str
) -> Callable[[HttpRequest, KnowledgeBase], None]:
    def act(request: HttpRequest, kb: KnowledgeBase) -> None:
        try:
            (number,) = _ids([request.POST.get("version", "")])
            version = change(version_of(kb, number))
        except ValueError:
            messages.error(request, "No such version.")
        except DomainError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Version {version.number} {done}.")

    return act


def _sync(request: HttpRequest, kb: KnowledgeBase) -> None:
    try:
        (source_id,) = _ids([request.POST.get("source", "")])
        task = queue_sync(source_of(kb, source_id))
    except (ValueError, DomainError):
        messages.error(request, "No such source.")
    else:
        messages.success(request, f"Syncing source {source_id} (task {task.task_id}).")


def _reingest(request: HttpRequest, kb: KnowledgeBase) -> None:
    documents = list(documents_of(kb).filter(pk__in=_ids(request.POST.getlist("documents"))))
    if not documents:
        messages.error(request, "Select the documents to re-ingest.")
        return
    report_reingest(request, kb, documents)


def report_reingest(request: HttpRequest, kb: KnowledgeBase, documents: list[Document]) -> None:
    """Re-ingest a KB's documents and say what was queued (this page, and the documents' change list)."""
    task, skipped = reingest_documents(kb, documents)
    if task is not None:
        count = len(documents) - len(skipped)
        messages.success(request, f"Re-ingesting {count} document(s) of {kb.name} (task {task.task_id}).")
    if skipped:
        names = ", ".join(document.source_uri for document in skipped)
        messages.warning(request, f"No stored original to re-ingest (upload the file again): {names}")


ACTIONS = {
    "upload": _upload,
    "activate": _version_action(activate_version, "is active: searches use it now"),
    "retire": _version_action(retire_version, "is retired"),
    "reingest": _reingest,
    "sync": _sync,
}
