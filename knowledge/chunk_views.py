"""``/api/v1/knowledge-bases/{kb_id}/documents/{doc_id}/chunks``: a curator lists a document's chunks,
edits, disables or enables one (PATCH ``.../chunks/{chunk_id}``) and adds one (POST). Each change is
re-embedded and re-indexed in every store before the answer (``knowledge.chunk_curation``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response

from core.schema import IDEMPOTENCY_KEY_HEADER, error_responses
from knowledge.chunk_curation import add_chunk, edit_chunk
from knowledge.chunk_selectors import document_chunks
from knowledge.models import Document
from knowledge.selectors.api import document_of, knowledge_base_of
from knowledge.views import KnowledgeApiViewSet
from tenants.requests import TenantRequest


class ChunkOutput(serializers.Serializer[Any]):
    id = serializers.IntegerField(allow_null=True, help_text="null only for an added chunk awaiting review")
    ordinal = serializers.IntegerField(help_text="its place in the document")
    content = serializers.CharField()
    enabled = serializers.BooleanField(help_text="false: disabled, out of every search")
    manual = serializers.BooleanField(help_text="added by a curator")
    edited = serializers.BooleanField(help_text="a curator changed it (edited, disabled, or added it)")
    original_content = serializers.CharField(allow_null=True, help_text="the text ingestion cut, when edited")
    needs_review = serializers.BooleanField(
        help_text="the file changed and no chunk has the original text any more: the edit is not applied"
    )
    edited_by = serializers.CharField(help_text="the API key's name or prefix, or the console user")
    edited_at = serializers.DateTimeField(allow_null=True)
    token_count = serializers.IntegerField(allow_null=True)
    metadata = serializers.DictField(help_text="with `locator`, where the chunk lies in the document")


class ChunkListOutput(serializers.Serializer[Any]):
    chunks = ChunkOutput(many=True)
    needs_review = ChunkOutput(many=True, help_text="edits a changed file left unapplied")


# A chunk's text holds a character other than white space. Spelled out for both regex engines: the schema's
# pattern is read by ECMA rules, whose \s lacks \x1c-\x1f and \x85, which Python's \s (and str.strip) has.
CHUNK_TEXT = r"[^\s\x1c-\x1f\x85]"


def chunk_text(**options: Any) -> serializers.RegexField:
    return serializers.RegexField(CHUNK_TEXT, max_length=20000, trim_whitespace=True, **options)


class ChunkPatchInput(serializers.Serializer[Any]):
    content = chunk_text(required=False)
    enabled = serializers.BooleanField(required=False)


class ChunkCreateInput(serializers.Serializer[Any]):
    content = chunk_text()


def editor_of(request: TenantRequest) -> str:
    key = request.auth
    return f"api key {getattr(key, 'name', '') or getattr(key, 'prefix', '')}".strip()


@extend_schema_view(
    list=extend_schema(
        summary="A document's chunks, in order",
        description="Its active version's chunks and the disabled ones; `needs_review`: edits a changed file left unapplied.",
        responses={200: ChunkListOutput, **error_responses(401, 403, 404, 429)},
    ),
    create=extend_schema(
        summary="Add a chunk to a document",
        description="Needs the `ingest` scope. Embedded and indexed in every store before the answer; kept across re-ingestion.",
        request=ChunkCreateInput,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={201: ChunkListOutput, **error_responses(400, 401, 403, 404, 422, 429)},
    ),
    partial_update=extend_schema(
        summary="Edit, disable or enable a chunk",
        description=(
            "Needs the `ingest` scope. `content` replaces its text, `enabled` takes it out of every search or "
            "back. Re-embedded and re-indexed in every store (vectors, keyword index, graph) before the answer, "
            "and cached answers are invalidated. The edit survives re-ingesting an unchanged file and goes into "
            "version rebuilds; when the file changed and no chunk has the original text any more, it is flagged "
            "`needs_review` and not applied."
        ),
        request=ChunkPatchInput,
        responses={200: ChunkListOutput, **error_responses(400, 401, 403, 404, 422, 429)},
    ),
)
class ChunkViewSet(KnowledgeApiViewSet):
    def _document(self, request: TenantRequest, kb_id: int, doc_id: int) -> Document:
        key = request.auth  # a KB outside a KB-limited key's list, or a document it may not read, is missing
        reader = key.listing_reader()
        return document_of(knowledge_base_of(request.tenant, kb_id, key.reachable_kb_ids, reader), doc_id, reader)

    def list(self, request: TenantRequest, kb_id: int, doc_id: int) -> Response:
        return Response(ChunkListOutput(document_chunks(self._document(request, kb_id, doc_id))).data)

    def create(self, request: TenantRequest, kb_id: int, doc_id: int) -> Response:
        body = ChunkCreateInput(data=request.data)
        body.is_valid(raise_exception=True)
        document = self._document(request, kb_id, doc_id)
        add_chunk(document, body.validated_data["content"], editor=editor_of(request))
        return Response(ChunkListOutput(document_chunks(document)).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: TenantRequest, kb_id: int, doc_id: int, pk: int) -> Response:
        body = ChunkPatchInput(data=request.data)
        body.is_valid(raise_exception=True)
        document = self._document(request, kb_id, doc_id)
        edit_chunk(document, int(pk), **body.validated_data, editor=editor_of(request))
        return Response(ChunkListOutput(document_chunks(document)).data)
