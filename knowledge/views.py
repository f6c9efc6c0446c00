"""Endpoints over a tenant's knowledge: knowledge bases, their documents, versions, ingestion tasks and
sources. Thin: selectors read, services write, the exception handler maps errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.idempotency import IdempotentPostMixin
from core.parsers import StrictJSONParser
from core.ratelimit import RateLimitedMixin
from core.schema import IDEMPOTENCY_KEY_HEADER, ErrorOutput, error_responses
from engines.embedders import EmbeddingError
from knowledge.acls import set_default_acl
from knowledge.documents import (
    check_upload_size,
    check_upload_sizes,
    delete_document,
    queue_uploads,
    update_document_labels,
)
from knowledge.errors import InvalidEmbeddingModel
from knowledge.ingestion.files import Labels, labels_from
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion, KnowledgeTask
from knowledge.parsing import ParseError
from knowledge.selectors.api import (
    document_of,
    documents_of,
    knowledge_base_of,
    knowledge_bases_of,
    source_of,
    sources_of,
    task_status,
    version_of,
    versions_of,
)
from knowledge.serializers import (
    DocumentOutput,
    DocumentUpdateInput,
    KnowledgeBaseInput,
    KnowledgeBaseOutput,
    KnowledgeBaseUpdateInput,
    SourceInput,
    SourceOutput,
    SourceSyncOutput,
    SourceUpdateInput,
    TaskOutput,
    UploadInput,
    UploadOutput,
    VersionBuildOutput,
    VersionInput,
    VersionOutput,
)
from knowledge.sources import create_source, delete_source, queue_sync, update_source
from knowledge.versions import GATED, activate_version, retire_version, start_version_build
from tenants.authentication import HasTenant
from tenants.models import Scope
from tenants.permissions import HasScope, InsufficientScope
from tenants.requests import TenantRequest

ID_PATTERN = "[0-9]{1,18}"  # fits a bigint: a longer id is an unknown path, never a database error


VERSION_CONFLICT = OpenApiResponse(
    response=ErrorOutput,
    description="A version is still building, or this one is building or failed (`version_conflict`); or a "
    "request with the same `Idempotency-Key` is still running (`idempotency_in_flight`).",
)


# A POST changing one version: no body; the version as it is afterwards.
VERSION_CHANGE: dict[str, Any] = {
    "request": None,
    "parameters": [IDEMPOTENCY_KEY_HEADER],
    "responses": {200: VersionOutput, **error_responses(400, 401, 403, 404, 422, 429), 409: VERSION_CONFLICT},
}


class KnowledgePagination(LimitOffsetPagination):
    """``?limit=`` (1 or more; above ``max_limit`` counts as it) and ``?offset=`` (0 or more): a value that
    is no such integer (``null``, ``true``, ``-1``) is a 400, not silently the default."""

    default_limit = 100
    max_limit = 1000

    def get_limit(self, request: Request) -> int:
        given = request.query_params.get(self.limit_query_param)
        if given is None:
            return self.default_limit
        return min(_paging_integer(self.limit_query_param, given, minimum=1, clamp=self.max_limit), self.max_limit)

    def get_offset(self, request: Request) -> int:
        given = request.query_params.get(self.offset_query_param)
        return 0 if given is None else _paging_integer(self.offset_query_param, given, minimum=0)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["schema"]["minimum"] = 1
            else:
                parameter["schema"].update(minimum=0, maximum=MAX_OFFSET)
        return parameters


MAX_OFFSET = 10**18 - 1  # a PostgreSQL bigint holds it


def _paging_integer(name: str, given: str, *, minimum: int, clamp: int | None = None) -> int:
    """``given`` as an integer of at least ``minimum`` (and at most ``MAX_OFFSET``, unless ``clamp``: a larger
    one counts as ``clamp``), else a 400."""
    if given.isascii() and given.isdigit():
        if len(given) > 18:  # also spares int() a huge string
            if clamp is not None:
                return clamp
        elif int(given) >= minimum:
            return int(given)
    raise ValidationError({name: [f"must be an integer from {minimum} to {MAX_OFFSET}, not {given[:40]!r}"]})


class KnowledgeApiViewSet(RateLimitedMixin, IdempotentPostMixin, viewsets.GenericViewSet[Any]):
    """Reads need the ``search`` or ``ingest`` scope and count as ``knowledge`` requests; writes need
    ``ingest`` and count as ``ingest`` requests (a rate tier may limit each in ``endpoint_limits``).
    A POST with an ``Idempotency-Key`` runs once; its retries get the first answer (``core.idempotency``)."""

    permission_classes = [HasTenant, HasScope]
    pagination_class: type[BasePagination] | None = KnowledgePagination
    lookup_value_regex = ID_PATTERN

    def scopes_for(self, request: Request) -> list[str]:
        if request.method in permissions.SAFE_METHODS:
            return [Scope.SEARCH, Scope.INGEST]
        return [Scope.INGEST]

    def rate_limit_endpoint(self, request: Request) -> str:
        return "knowledge" if request.method in permissions.SAFE_METHODS else "ingest"

    def paginated(
        self, queryset: QuerySet[Any] | Sequence[Any], output: type[serializers.BaseSerializer[Any]]
    ) -> Response:
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(output(page, many=True).data)


KB_EXAMPLE = {
    "id": 3, "name": "handbook", "description": "", "embedding_model": "all-MiniLM-L6-v2", "embedding_dim": 384,
    "chunk_size": 200, "chunk_overlap": 32, "chunking": "plain", "parent_chunk_size": None, "languages": ["en"], "active_version": 1, "document_count": 12,
    "created_at": "2026-12-01T05:30:00Z",
}  # fmt: skip


@extend_schema_view(
    list=extend_schema(
        summary="The tenant's knowledge bases",
        responses={200: KnowledgeBaseOutput(many=True), **error_responses(400, 401, 403, 429)},
    ),
    retrieve=extend_schema(
        summary="One knowledge base", responses={200: KnowledgeBaseOutput, **error_responses(401, 403, 404, 429)}
    ),
    partial_update=extend_schema(
        summary="Set who may read a knowledge base's documents that set no ACL",
        description=(
            "`default_acl`: principals (`user:<id>`, `group:<id>`, `*` for everyone in the tenant), at least one. "
            "Applied to every chunk of those documents at once, in every version; the next search reads it "
            "(docs/permissions.md). Needs the `ingest` scope."
        ),
        request=KnowledgeBaseUpdateInput,
        responses={200: KnowledgeBaseOutput, **error_responses(400, 401, 403, 404, 429)},
        examples=[OpenApiExample("Staff only", request_only=True, value={"default_acl": ["group:staff"]})],
    ),
    create=extend_schema(
        summary="Create a knowledge base",
        description="Needs the `ingest` scope. The embedding model, chunking and languages are fixed per version.",
        request=KnowledgeBaseInput,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            201: KnowledgeBaseOutput,
            **error_responses(400, 401, 403, 422, 429),
            409: OpenApiResponse(
                description="The tenant already has a knowledge base of that name (`knowledge_base_exists`), or a "
                "request with the same `Idempotency-Key` is still running (`idempotency_in_flight`)."
            ),
        },
        examples=[
            OpenApiExample("Create", request_only=True, value={"name": "handbook", "chunk_size": 200}),
            OpenApiExample(
                "Parent-child chunks",
                request_only=True,
                value={"name": "manuals", "chunking": "parent_child", "chunk_size": 128, "parent_chunk_size": 512},
            ),
            OpenApiExample(
                "Created", response_only=True, status_codes=["201"], value={**KB_EXAMPLE, "document_count": 0}
            ),
        ],
    ),
)
class KnowledgeBaseViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases``: list, read and create the tenant's knowledge bases."""

    def list(self, request: TenantRequest) -> Response:
        return self.paginated(
            knowledge_bases_of(request.tenant, request.auth.reachable_kb_ids, request.auth.listing_reader()),
            KnowledgeBaseOutput,
        )

    def retrieve(self, request: TenantRequest, pk: int) -> Response:
        return Response(KnowledgeBaseOutput(_kb(request, pk)).data)

    def partial_update(self, request: TenantRequest, pk: int) -> Response:
        kb = _kb(request, pk)
        params = KnowledgeBaseUpdateInput(data=request.data)
        params.is_valid(raise_exception=True)
        set_default_acl(kb, params.validated_data["default_acl"])
        return Response(KnowledgeBaseOutput(_kb(request, pk)).data)

    def create(self, request: TenantRequest) -> Response:
        if request.auth.reachable_kb_ids is not None:
            raise InsufficientScope(
                "A key limited to knowledge bases cannot create one: it could not reach it.",
                details={"required_scope": Scope.INGEST},
            )
        params = KnowledgeBaseInput(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            kb = create_knowledge_base(tenant=request.tenant, **params.validated_data)
        except EmbeddingError as exc:
            raise InvalidEmbeddingModel(str(exc)) from exc
        body = KnowledgeBaseOutput(_kb(request, kb.pk)).data
        return Response(body, status=status.HTTP_201_CREATED)


@extend_schema_view(
    list=extend_schema(
        summary="Documents of a knowledge base",
        description=(
            "Each with its status (`pending`, `ready`, `failed`, or `removed` until purged), chunks and the error "
            "of its last ingestion."
        ),
        responses={200: DocumentOutput(many=True), **error_responses(400, 401, 403, 404, 429)},
    ),
    retrieve=extend_schema(
        summary="One document", responses={200: DocumentOutput, **error_responses(401, 403, 404, 429)}
    ),
    partial_update=extend_schema(
        summary="Change a document's labels or who may read it",
        description=(
            "Any of `title`, `tags`, `metadata` and `acl` (principals; `[]`: the knowledge base's `default_acl`). "
            "Written onto every chunk of it in every version at once, so the next search, a re-ingestion, a "
            "rebuild and a rollback all hold it (docs/permissions.md). Needs the `ingest` scope."
        ),
        request=DocumentUpdateInput,
        responses={200: DocumentOutput, **error_responses(400, 401, 403, 404, 429)},
        examples=[OpenApiExample("HR only", request_only=True, value={"acl": ["group:hr"]})],
    ),
    destroy=extend_schema(
        summary="Delete a document",
        description=(
            "Its chunks leave every search at once (the database rows and the keyword index together); the "
            "document is `removed` until a task purges its row and stored original, moments later."
        ),
        responses={204: None, **error_responses(401, 403, 404, 429)},
    ),
    create=extend_schema(
        summary="Upload documents for ingestion",
        description=(
            "Multipart: one or more `files` and an optional `metadata` field (JSON: `title`, `tags`, `metadata`, as a "
            "sidecar file sets them). Answers 202 with the task that ingests them: follow it at `status_url`. A file "
            "of an unsupported type is `failed` at once; one that cannot be parsed is marked `failed` by the task, "
            "with the reason. Limits: `UPLOAD_MAX_FILE_BYTES` per file, `UPLOAD_MAX_REQUEST_BYTES` per request "
            "(413). Needs the `ingest` scope."
        ),
        request={"multipart/form-data": UploadInput},
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={202: UploadOutput, **error_responses(400, 401, 403, 404, 409, 413, 422, 429)},
        examples=[
            OpenApiExample(
                "Queued",
                response_only=True,
                status_codes=["202"],
                value={
                    "task_id": "0b8f3f0e-4c1b-4a55-9d52-0f5b8a1c2d3e",
                    "status_url": "/api/v1/tasks/0b8f3f0e-4c1b-4a55-9d52-0f5b8a1c2d3e",
                    "documents": [
                        {"id": 41, "name": "guide.md", "status": "pending", "error": ""},
                        {"id": 42, "name": "photo.gif", "status": "failed", "error": "unsupported file type .gif"},
                    ],
                },
            )
        ],
    ),
)
class DocumentViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases/{kb_id}/documents``: upload, list, read and delete documents."""

    parser_classes = [MultiPartParser, StrictJSONParser]  # uploads; label and ACL changes (PATCH)

    def before_idempotency(self, request: Request) -> None:
        """A body too large is refused before an ``Idempotency-Key`` reads it for its fingerprint."""
        check_upload_size(
            int(request.META.get("CONTENT_LENGTH") or 0), settings.UPLOAD_MAX_REQUEST_BYTES, "the request"
        )

    def list(self, request: TenantRequest, kb_id: int) -> Response:
        return self.paginated(documents_of(_kb(request, kb_id), request.auth.listing_reader()), DocumentOutput)

    def retrieve(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        return Response(DocumentOutput(document_of(_kb(request, kb_id), pk, request.auth.listing_reader())).data)

    def partial_update(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        kb = _kb(request, kb_id)
        document = document_of(kb, pk)
        params = DocumentUpdateInput(data=request.data)
        params.is_valid(raise_exception=True)
        update_document_labels(document, **params.validated_data)
        return Response(DocumentOutput(document_of(kb, pk)).data)

    def destroy(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        delete_document(document_of(_kb(request, kb_id), pk, request.auth.listing_reader()))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def create(self, request: TenantRequest, kb_id: int) -> Response:
        kb = _kb(request, kb_id)
        self.before_idempotency(request)
        params = UploadInput(data=request.data)
        params.is_valid(raise_exception=True)
        uploads = params.validated_data["files"]
        check_upload_sizes(uploads)
        labels = _labels(params.validated_data.get("metadata"))
        task, documents = queue_uploads(kb, uploads, labels)
        body = {
            "task_id": task.task_id,
            "status_url": status_url(task),
            "documents": documents,
        }
        return Response(UploadOutput(body).data, status=status.HTTP_202_ACCEPTED)


@extend_schema_view(
    list=extend_schema(
        summary="Versions of a knowledge base",
        description="Newest first: status, settings, documents and chunks each holds, build and activation times.",
        responses={200: VersionOutput(many=True), **error_responses(400, 401, 403, 404, 429)},
    ),
    create=extend_schema(
        summary="Build a new version",
        description=(
            "Answers 202 with the task that builds it from the stored originals (re-parse, re-chunk, re-embed, new "
            "keyword index) while searches keep reading the active version. Omitted settings are the active "
            "version's. It is `ready` when every ready document has chunks in it and it answers the tenant's "
            "most frequent recent queries without error, else `failed` (`error` names the documents or the "
            "query); `activate: auto` then switches to it. One version builds at a time (409). Needs `ingest`."
        ),
        request=VersionInput,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={202: VersionBuildOutput, **error_responses(400, 401, 403, 404, 422, 429), 409: VERSION_CONFLICT},
        examples=[OpenApiExample("Rechunk", request_only=True, value={"chunk_size": 120, "activate": "auto"})],
    ),
    activate=extend_schema(
        summary="Switch searches to a version",
        description=(
            "In one transaction: the active version is retired (kept), this one becomes active. Activating a "
            "retired version is the rollback: instant, nothing is re-embedded. No cached answer of either version "
            "is served afterwards. Needs `ingest`."
        ),
        **VERSION_CHANGE,
    ),
    retire=extend_schema(
        summary="Set aside a ready version",
        description=(
            "For a version built but not to be activated: it is `retired`, purged `KB_VERSION_RETENTION_DAYS` "
            "later, and can be activated until then. The active version is retired by activating another; a "
            "building one cannot be stopped (409). Needs `ingest`."
        ),
        **VERSION_CHANGE,
    ),
)
class VersionViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases/{kb_id}/versions``: blue-green versions, by number."""

    lookup_field = "number"

    def list(self, request: TenantRequest, kb_id: int) -> Response:
        return self.paginated(versions_of(_kb(request, kb_id), request.auth.listing_reader()), VersionOutput)

    def create(self, request: TenantRequest, kb_id: int) -> Response:
        kb = _kb(request, kb_id)
        params = VersionInput(data=request.data)
        params.is_valid(raise_exception=True)
        options = dict(params.validated_data)
        activations: dict[str, bool | str] = {"auto": True, "manual": False, "gated": GATED}
        activate = activations[options.pop("activate")]
        try:
            version, task = start_version_build(kb, activate=activate, **options)
        except EmbeddingError as exc:
            raise InvalidEmbeddingModel(str(exc)) from exc
        body = {
            "task_id": task.task_id,
            "status_url": status_url(task),
            "version": version_of(kb, version.number),
        }
        return Response(VersionBuildOutput(body).data, status=status.HTTP_202_ACCEPTED)

    @action(detail=True, methods=["post"])
    def activate(self, request: TenantRequest, kb_id: int, number: int) -> Response:
        return self._change(request, kb_id, number, activate_version)

    @action(detail=True, methods=["post"])
    def retire(self, request: TenantRequest, kb_id: int, number: int) -> Response:
        return self._change(request, kb_id, number, retire_version)

    def _change(
        self, request: TenantRequest, kb_id: int, number: int, change: Callable[[KnowledgeBaseVersion], object]
    ) -> Response:
        """Apply a version service to one of the tenant's versions; the version as it is afterwards."""
        kb = _kb(request, kb_id)
        change(version_of(kb, number, counted=False))
        return Response(VersionOutput(version_of(kb, number)).data)


@extend_schema_view(
    retrieve=extend_schema(
        summary="State and progress of a task",
        description=(
            "Only for tasks of the caller's tenant. `state`: PENDING (queued), STARTED, PROGRESS (see `progress`), "
            "SUCCESS (see `result`), FAILURE or RETRY (see `error`)."
        ),
        responses={200: TaskOutput, **error_responses(401, 403, 404, 429)},
        examples=[
            OpenApiExample(
                "Running",
                response_only=True,
                value={
                    "task_id": "0b8f3f0e-4c1b-4a55-9d52-0f5b8a1c2d3e",
                    "kind": "ingest",
                    "knowledge_base": 3,
                    "state": "PROGRESS",
                    "progress": {"done": 3, "total": 10, "unit": "documents"},
                    "result": None,
                    "error": None,
                },  # fmt: skip
            )
        ],
    ),
)
class TaskViewSet(KnowledgeApiViewSet):
    """``/api/v1/tasks/{task_id}``."""

    lookup_value_regex = "[0-9a-f-]{1,64}"

    def retrieve(self, request: TenantRequest, pk: str) -> Response:
        return Response(TaskOutput(task_status(request.tenant, pk, request.auth.reachable_kb_ids)).data)


SOURCE_EXAMPLE = {
    "id": 5, "kind": "folder", "path": "/srv/retrieval/var/sources/handbook", "urls": [],
    "schedule": {"interval_seconds": 60}, "enabled": True,
    "runs": [{
        "id": 812, "trigger": "schedule", "status": "succeeded", "started_at": "2026-12-01T08:01:00Z",
        "finished_at": "2026-12-01T08:01:02Z", "added": 0, "replaced": 1, "unchanged": 11, "removed": 0,
        "failed": 0, "failures": [], "error": "",
    }],
    "document_count": 12, "created_at": "2026-12-01T07:30:00Z",
}  # fmt: skip


@extend_schema_view(
    list=extend_schema(
        summary="Sources of a knowledge base",
        description="Each with its schedule and latest runs. Needs the `admin` scope.",
        responses={200: SourceOutput(many=True), **error_responses(400, 401, 403, 404, 429)},
        examples=[OpenApiExample("Sources", response_only=True, value=[SOURCE_EXAMPLE])],
    ),
    retrieve=extend_schema(summary="One source", responses={200: SourceOutput, **error_responses(401, 403, 404, 429)}),
    create=extend_schema(
        summary="Register a folder or a list of URLs as a source",
        description=(
            "Beat syncs it every `interval_seconds` or on a five-field `crontab` (UTC): new files are ingested, "
            "changed ones re-ingested (their old chunks answer until the new ones commit), files gone from the "
            "source leave search at once and are purged after `SOURCE_REMOVAL_GRACE_HOURS`. A folder must lie under "
            "`KNOWLEDGE_SOURCE_ROOTS` (a relative path is taken from the first root); `..`, a path outside the roots, "
            "a symbolic link out of them, or a folder another tenant's source reads is a 400 `invalid_source_path` "
            "whose `details.rule` names the rule. URLs are fetched with `SOURCE_URL_TIMEOUT_S` and "
            "`SOURCE_URL_MAX_BYTES`, never from (or redirected to) non-public addresses, and conditionally "
            "(ETag / Last-Modified). Needs the `admin` scope."
        ),
        request=SourceInput,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={201: SourceOutput, **error_responses(400, 401, 403, 404, 409, 413, 422, 429)},
        examples=[
            OpenApiExample(
                "Folder", request_only=True, value={"kind": "folder", "path": "handbook", "interval_seconds": 60}
            ),
            OpenApiExample(
                "URLs",
                request_only=True,
                value={"kind": "urls", "urls": ["https://example.com/faq.html"], "crontab": "*/15 * * * *"},
            ),
            OpenApiExample(
                "Registered", response_only=True, status_codes=["201"], value={**SOURCE_EXAMPLE, "runs": []}
            ),
        ],
    ),
    partial_update=extend_schema(
        summary="Change a source",
        description=(
            "Any of: a URL source's `urls` (the whole new list; a URL dropped leaves search at the next sync), "
            "its schedule (`interval_seconds` or `crontab`), `enabled` (false pauses the scheduled syncs, a sync "
            "asked for by hand still runs). A folder's path does not change: register another source. Needs the "
            "`admin` scope."
        ),
        request=SourceUpdateInput,
        responses={200: SourceOutput, **error_responses(400, 401, 403, 404, 413, 429)},
        examples=[
            OpenApiExample("Pause", request_only=True, value={"enabled": False}),
            OpenApiExample("Every 5 minutes", request_only=True, value={"interval_seconds": 300}),
        ],
    ),
    destroy=extend_schema(
        summary="Stop syncing a source",
        description="The source and its schedule go; the documents it brought stay in the knowledge base.",
        responses={204: None, **error_responses(401, 403, 404, 429)},
    ),
    sync=extend_schema(
        summary="Sync a source now",
        description="Answers 202 with the task that syncs it (its run is recorded like a scheduled one).",
        request=None,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={202: SourceSyncOutput, **error_responses(400, 401, 403, 404, 409, 422, 429)},
    ),
)
class SourceViewSet(KnowledgeApiViewSet):
    """``/api/v1/knowledge-bases/{kb_id}/sources``: folders and URL lists kept in sync by beat; every
    method needs the ``admin`` scope (a folder source reads the server's disk)."""

    def scopes_for(self, request: Request) -> list[str]:
        return [Scope.ADMIN]

    def list(self, request: TenantRequest, kb_id: int) -> Response:
        return self.paginated(sources_of(_kb(request, kb_id)), SourceOutput)

    def retrieve(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        return Response(SourceOutput(source_of(_kb(request, kb_id), pk)).data)

    def create(self, request: TenantRequest, kb_id: int) -> Response:
        kb = _kb(request, kb_id)
        params = SourceInput(data=request.data)
        params.is_valid(raise_exception=True)
        source = create_source(kb, **params.validated_data)
        return Response(SourceOutput(source_of(kb, source.pk)).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        kb = _kb(request, kb_id)
        source = source_of(kb, pk)
        params = SourceUpdateInput(data=request.data, context={"kind": source.kind})
        params.is_valid(raise_exception=True)
        update_source(source, **params.validated_data)
        return Response(SourceOutput(source_of(kb, pk)).data)

    def destroy(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        delete_source(source_of(_kb(request, kb_id), pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["post"])
    def sync(self, request: TenantRequest, kb_id: int, pk: int) -> Response:
        source = source_of(_kb(request, kb_id), pk)
        task = queue_sync(source)
        body = {"task_id": task.task_id, "status_url": status_url(task), "source": source.pk}
        return Response(SourceSyncOutput(body).data, status=status.HTTP_202_ACCEPTED)


def _kb(request: TenantRequest, kb_id: int) -> KnowledgeBase:
    """The caller's KB ``kb_id``: one outside a KB-limited key's list is as missing as another tenant's."""
    return knowledge_base_of(request.tenant, kb_id, request.auth.reachable_kb_ids, request.auth.listing_reader())


def status_url(task: KnowledgeTask) -> str:
    return reverse("task-detail", kwargs={"pk": task.task_id})


def _labels(data: object) -> Labels | None:
    """The upload's ``metadata`` field as labels; a 400 naming what is wrong."""
    if data is None:
        return None
    try:
        return labels_from(data, where="metadata")
    except ParseError as exc:
        raise ValidationError({"metadata": [str(exc)]}) from exc
