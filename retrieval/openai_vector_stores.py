"""OpenAI's vector-store search API over this service's knowledge bases (a KB is a vector store, its id the
store's id): ``GET /v1/vector_stores``, ``GET /v1/vector_stores/{id}``, ``POST /v1/vector_stores/{id}/search``,
for tools built on the OpenAI SDK (``OpenAI(base_url="http://<host>/v1", api_key=<service key>)``).

Searches are hybrid searches through the REST API's entry point (``cached_search``: same ranking, cache,
rate limit counter ``hybrid`` and access rules). Requests take OpenAI's shape: ``query`` (a string, or a
list of strings searched as one query), ``max_num_results`` (1-50), ``filters`` (OpenAI's comparison and
compound filters, mapped onto the service's filter language by :func:`service_filter`),
``ranking_options`` (``score_threshold`` in [0, 1]; ``ranker: "none"`` is accepted, nothing is reranked
by default) and ``rewrite_query`` (true: synonyms and spelling expansion). A field OpenAI's API does not
know is a 400 ``unknown_parameter``, as OpenAI answers. Scores are each hit's ``relevance`` (raised where
needed to keep the fused order, as for Dify): in [0, 1], and what ``score_threshold`` compares against.
Errors keep the service's shape, ``{"error": {"code", "message", "request_id"}}``, which the OpenAI SDK
reads into its exceptions (``NotFoundError``, ``BadRequestError``, ``PermissionDeniedError`` …).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import DomainError
from core.ratelimit import RateLimitedMixin
from core.schema import error_responses
from knowledge.errors import KnowledgeBaseNotFound
from knowledge.selectors.api import document_counts_by_status, knowledge_base_of, knowledge_bases_of
from retrieval.access import key_access
from retrieval.cache import cached_search
from retrieval.dify import scores_in_fused_order
from retrieval.errors import InvalidFilter
from retrieval.expansion import ExpansionOptions
from retrieval.selectors import default_score_threshold
from retrieval.serializers import MAX_QUERY_CHARS
from retrieval.types import SearchHit, SearchRequest
from tenants.authentication import HasTenant
from tenants.models import Scope
from tenants.permissions import HasScope
from tenants.requests import TenantRequest

MAX_RESULTS = 50
SEARCH_FIELDS = {"query", "filters", "max_num_results", "ranking_options", "rewrite_query"}
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
MAX_FILTER_DEPTH = 8
_BUSINESS_FIELDS = ("doc_type", "doc_id", "created_at")
_TAG_OPERATORS: dict[str, Callable[[Any], Any]] = {"eq": lambda v: v, "in": lambda v: {"any": v}}
_ID = re.compile(r"[1-9][0-9]{0,18}")


class UnknownParameter(DomainError):
    code = "unknown_parameter"


# --- filters --------------------------------------------------------------------------------------


def service_filter(node: Any, path: str = "filters", depth: int = 0) -> dict[str, Any]:
    """OpenAI's ``{"key", "type", "value"}`` / ``{"type": "and"|"or", "filters": [...]}`` as the service's
    filter: ``doc_type``, ``doc_id``, ``created_at`` and ``tags`` name the chunk's fields (``tags``: ``eq`` is
    membership, ``in`` any of, ``ne`` / ``nin`` their complements), any other key is ``metadata.<key>``."""
    if depth > MAX_FILTER_DEPTH:
        raise InvalidFilter(f"{path}: nested deeper than {MAX_FILTER_DEPTH} levels")
    if not isinstance(node, dict):
        raise InvalidFilter(f"{path}: expected a comparison or compound filter object")
    kind = node.get("type")
    if kind in ("and", "or"):
        children = node.get("filters")
        if not isinstance(children, list) or not children:
            raise InvalidFilter(f"{path}.filters: expected a non-empty list of filters")
        return {kind: [service_filter(child, f"{path}.filters[{i}]", depth + 1) for i, child in enumerate(children)]}
    if kind not in COMPARISONS:
        raise InvalidFilter(f"{path}.type: expected one of {', '.join((*COMPARISONS, 'and', 'or'))}")
    key, value = node.get("key"), node.get("value")
    if not isinstance(key, str) or not key:
        raise InvalidFilter(f"{path}.key: expected an attribute name")
    if "value" not in node:
        raise InvalidFilter(f"{path}.value: required")
    if key == "tags":
        positive = {"ne": "eq", "nin": "in"}.get(kind, kind)
        if positive not in _TAG_OPERATORS:
            raise InvalidFilter(f"{path}: operator {kind!r} does not apply to tags")
        clause = {"tags": _TAG_OPERATORS[positive](value)}
        return {"not": clause} if positive != kind else clause
    name = key if key in _BUSINESS_FIELDS else f"metadata.{key}"
    return {name: {kind: value}}


# --- shapes ---------------------------------------------------------------------------------------


class RankingOptionsInput(serializers.Serializer[Any]):
    ranker = serializers.ChoiceField(choices=("none", "auto", "default-2024-11-15"), required=False)
    score_threshold = serializers.FloatField(min_value=0, max_value=1, required=False, default=0.0)


class VectorStoreSearchInput(serializers.Serializer[Any]):
    query = serializers.JSONField(help_text="a string, or a list of strings searched as one query")
    max_num_results = serializers.IntegerField(min_value=1, max_value=MAX_RESULTS, default=10)
    filters = serializers.JSONField(required=False, allow_null=True, help_text="OpenAI's comparison/compound filter")
    ranking_options = RankingOptionsInput(required=False)
    rewrite_query = serializers.BooleanField(default=False, help_text="true: synonym and spelling expansion")

    def validate_query(self, value: Any) -> str:
        parts = [value] if isinstance(value, str) else value
        if not isinstance(parts, list) or not all(isinstance(part, str) for part in parts):
            raise serializers.ValidationError("expected a string or a list of strings")
        query = " ".join(part.strip() for part in parts if part.strip())
        if not query:
            raise serializers.ValidationError("must not be blank")
        if len(query) > MAX_QUERY_CHARS:
            raise serializers.ValidationError(f"longer than {MAX_QUERY_CHARS} characters")
        return query


class ContentOutput(serializers.Serializer[Any]):
    type = serializers.CharField(default="text")
    text = serializers.CharField()


class SearchResultOutput(serializers.Serializer[Any]):
    file_id = serializers.CharField(help_text="the document's id")
    filename = serializers.CharField(help_text="the document's source_uri")
    score = serializers.FloatField(help_text="relevance in [0, 1]")
    attributes = serializers.DictField(help_text="the chunk's scalar metadata, doc_type, kb_id, chunk_id, title…")
    content = ContentOutput(many=True)


class SearchPageOutput(serializers.Serializer[Any]):
    object = serializers.CharField(default="vector_store.search_results.page")
    search_query = serializers.ListField(child=serializers.CharField())
    data = SearchResultOutput(many=True)  # type: ignore[assignment]  # a declared field: DRF's serializer metaclass takes it off the class
    has_more = serializers.BooleanField()
    next_page = serializers.CharField(allow_null=True)


class FileCountsOutput(serializers.Serializer[Any]):
    in_progress = serializers.IntegerField()
    completed = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    total = serializers.IntegerField()


class VectorStoreOutput(serializers.Serializer[Any]):
    id = serializers.CharField()
    object = serializers.CharField(default="vector_store")
    created_at = serializers.IntegerField(help_text="Unix seconds")
    name = serializers.CharField()
    usage_bytes = serializers.IntegerField()
    file_counts = FileCountsOutput()
    status = serializers.CharField(help_text="completed, or in_progress while documents are being ingested")
    last_active_at = serializers.IntegerField(allow_null=True)
    expires_after = serializers.DictField(allow_null=True)
    expires_at = serializers.IntegerField(allow_null=True)
    metadata = serializers.DictField()


class VectorStoreListOutput(serializers.Serializer[Any]):
    object = serializers.CharField(default="list")
    data = VectorStoreOutput(many=True)  # type: ignore[assignment]  # a declared field: DRF's serializer metaclass takes it off the class
    first_id = serializers.CharField(allow_null=True)
    last_id = serializers.CharField(allow_null=True)
    has_more = serializers.BooleanField()


def vector_store(kb: Any, counts: dict[str, int]) -> dict[str, Any]:
    in_progress = counts.get("pending", 0)
    return {
        "id": str(kb.pk),
        "object": "vector_store",
        "created_at": int(kb.created_at.timestamp()),
        "name": kb.name,
        "usage_bytes": 0,
        "file_counts": {
            "in_progress": in_progress,
            "completed": counts.get("ready", 0),
            "failed": counts.get("failed", 0),
            "cancelled": 0,
            "total": sum(count for state, count in counts.items() if state != "removed"),
        },
        "status": "in_progress" if in_progress else "completed",
        "last_active_at": None,
        "expires_after": None,
        "expires_at": None,
        "metadata": {"description": kb.description} if kb.description else {},
    }


def search_result(hit: SearchHit, score: float) -> dict[str, Any]:
    scalars = {key: value for key, value in (hit.metadata or {}).items() if isinstance(value, (str, int, float, bool))}
    page = scalars.get("page")
    attributes = {
        **scalars,
        "kb_id": hit.kb_id,
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "doc_type": hit.doc_type,
        "title": hit.title or hit.source_uri,
        "source_uri": hit.source_uri,
        **({"section": hit.section} if hit.section else {}),
        **({"page": page} if page is not None else {}),
    }
    return {
        "file_id": str(hit.doc_id),
        "filename": hit.source_uri,
        "score": score,
        "attributes": attributes,
        "content": [{"type": "text", "text": hit.content}],
    }


def store_id(raw: str) -> int:
    """A vector store id is a KB id; any other string names no store (404, like a missing one)."""
    if not _ID.fullmatch(raw):
        raise KnowledgeBaseNotFound(f"unknown knowledge base id: {raw}", details={"kb_ids": [raw]})
    return int(raw)


# --- views ----------------------------------------------------------------------------------------


class VectorStoreApiView(RateLimitedMixin, APIView):
    permission_classes = [HasTenant, HasScope]
    required_scope = Scope.SEARCH

    def rate_limit_endpoint(self, request: Request) -> str:
        return "knowledge"


class VectorStoreListView(VectorStoreApiView):
    """``GET /v1/vector_stores``: the caller's knowledge bases, OpenAI's cursor page (``limit``, ``order``,
    ``after``, ``before``)."""

    @extend_schema(
        operation_id="openai_vector_stores_list",
        summary="OpenAI: list vector stores (knowledge bases)",
        parameters=[
            OpenApiParameter("limit", int, description="1-100, default 20"),
            OpenApiParameter("order", str, enum=["asc", "desc"], description="by creation; default desc"),
            OpenApiParameter("after", str, description="a vector store id: the page after it"),
            OpenApiParameter("before", str, description="a vector store id: the page before it"),
        ],
        responses={200: VectorStoreListOutput, **error_responses(400, 401, 403, 429)},
        tags=["openai"],
    )
    def get(self, request: TenantRequest) -> Response:
        params = request.query_params
        try:
            limit = int(params.get("limit", 20))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise serializers.ValidationError({"limit": ["must be an integer between 1 and 100"]})
        descending = params.get("order", "desc") != "asc"
        kbs = list(
            knowledge_bases_of(request.tenant, request.auth.reachable_kb_ids, request.auth.listing_reader()).order_by(
                *(("-created_at", "-id") if descending else ("created_at", "id"))
            )
        )
        ids = [kb.pk for kb in kbs]
        for cursor, side in ((params.get("after"), 1), (params.get("before"), -1)):
            if cursor is not None and _ID.fullmatch(cursor) and int(cursor) in ids:
                at = ids.index(int(cursor))
                kbs, ids = (kbs[at + 1 :], ids[at + 1 :]) if side == 1 else (kbs[:at], ids[:at])
        page = list(kbs[:limit])
        counts = document_counts_by_status([kb.pk for kb in page])
        data = [vector_store(kb, counts.get(kb.pk, {})) for kb in page]
        return Response({
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(ids) > limit,
        })  # fmt: skip


class VectorStoreDetailView(VectorStoreApiView):
    """``GET /v1/vector_stores/{id}``: one knowledge base as a vector store."""

    @extend_schema(
        operation_id="openai_vector_stores_retrieve",
        summary="OpenAI: retrieve a vector store (knowledge base)",
        responses={200: VectorStoreOutput, **error_responses(401, 403, 404, 429)},
        tags=["openai"],
    )
    def get(self, request: TenantRequest, vector_store_id: str) -> Response:
        kb = knowledge_base_of(
            request.tenant, store_id(vector_store_id), request.auth.reachable_kb_ids, request.auth.listing_reader()
        )
        return Response(vector_store(kb, document_counts_by_status([kb.pk]).get(kb.pk, {})))


class VectorStoreSearchView(VectorStoreApiView):
    """``POST /v1/vector_stores/{id}/search``: a hybrid search of that knowledge base in OpenAI's shape."""

    def rate_limit_endpoint(self, request: Request) -> str:
        return "hybrid"

    @extend_schema(
        operation_id="openai_vector_stores_search",
        summary="OpenAI: search a vector store (knowledge base)",
        request=VectorStoreSearchInput,
        responses={200: SearchPageOutput, **error_responses(400, 401, 403, 404, 429, 503)},
        tags=["openai"],
    )
    def post(self, request: TenantRequest, vector_store_id: str) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(body) - SEARCH_FIELDS)
        if unknown:
            raise UnknownParameter(
                f"Unrecognized request argument supplied: {unknown[0]}", details={"param": unknown[0]}
            )
        params = VectorStoreSearchInput(data=body)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        kb_id = knowledge_base_of(
            request.tenant, store_id(vector_store_id), request.auth.reachable_kb_ids, request.auth.listing_reader()
        ).pk
        ranking = data.get("ranking_options") or {}
        filters = data.get("filters")
        search_request = SearchRequest(
            query=data["query"],
            mode="hybrid",
            top_k=data["max_num_results"],
            kb_ids=[kb_id],
            filters=None if filters is None else service_filter(filters),
            # none sent (or OpenAI's default 0.0): the KB's own default, as Dify's retrieval applies it
            score_threshold=ranking.get("score_threshold") or default_score_threshold(request.tenant, kb_id),
            expand=ExpansionOptions(synonyms=True, spelling=True) if data["rewrite_query"] else ExpansionOptions(),
            **key_access(request.auth),  # the key's reader and knowledge bases (docs/permissions.md)
        )
        hits = cached_search(request.tenant, search_request).response.results
        return Response(
            {
                "object": "vector_store.search_results.page",
                "search_query": [data["query"]],
                "data": [search_result(hit, score) for hit, score in zip(hits, scores_in_fused_order(hits))],
                "has_more": False,
                "next_page": None,
            },
            status=status.HTTP_200_OK,
        )
