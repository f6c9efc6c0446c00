"""``GET /api/v1/documents/{id}/text``: the text a document's chunks were cut from, which every hit's
locator (``metadata.locator.chars``) points into, so a client can show and highlight the passage."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.ratelimit import RateLimitedMixin
from core.schema import error_responses
from knowledge.selectors.api import document_of_tenant
from knowledge.serializers import DocumentTextOutput
from tenants.authentication import HasTenant
from tenants.models import Scope
from tenants.permissions import HasScope
from tenants.requests import TenantRequest


class DocumentTextView(RateLimitedMixin, APIView):
    """Read with a ``search`` or ``ingest`` key, counted as a ``knowledge`` request (as document reads are)."""

    permission_classes = [HasTenant, HasScope]

    def scopes_for(self, request: Request) -> list[str]:
        return [Scope.SEARCH, Scope.INGEST]

    def rate_limit_endpoint(self, request: Request) -> str:
        return "knowledge"

    @extend_schema(
        summary="A document's extracted text",
        description=(
            "The text its chunks were cut from: each hit's `metadata.locator.chars` (`[start, end)`, in Unicode "
            "characters) points into it, so `text[start:end]` is the passage (a table chunk: its rows; its caption "
            "and header stand once, before them). Empty for a document last parsed before texts were kept (re-ingest "
            "it) or never parsed. Another tenant's document, one outside a KB-limited key's knowledge bases and one the key's reader may not read answer 404 like a missing one."
        ),
        responses={200: DocumentTextOutput, **error_responses(401, 403, 404, 429)},
        examples=[
            OpenApiExample(
                "Text",
                response_only=True,
                value={
                    "id": 41,
                    "knowledge_base": 3,
                    "title": "Router Manual",
                    "doc_type": "docx",
                    "text": "Unpack the unit.\n\nConnect the yellow WAN port.",
                    "length": 46,
                },  # fmt: skip
            )
        ],
    )
    def get(self, request: TenantRequest, pk: int) -> Response:
        # A KB-limited key's other KBs, and a document its reader may not read, are as missing.
        key = request.auth
        document = document_of_tenant(request.tenant, pk, key.reachable_kb_ids, key.listing_reader())
        return Response(DocumentTextOutput(document).data)
