"""Dify's External Knowledge API: ``POST /api/v1/dify/retrieval`` (endpoint to register in Dify: ``…/api/v1/dify``).

The contract follows Dify's documentation of the External Knowledge API
(https://docs.dify.ai/en/use-dify/knowledge/external-knowledge-api) and its client (langgenius/dify,
``api/services/knowledge/external/service.py`` through ``core/helper/ssrf_proxy.py``): ``Authorization:
Bearer <key>`` and a JSON body ``{"retrieval_setting": {"top_k", "score_threshold"}, "query",
"knowledge_id", "metadata_condition"}``, where ``score_threshold`` is 0.0 when the threshold is off in
Dify and ``metadata_condition`` is ``null`` when no condition is set. Dify reads ``records`` of a 200 and
treats any other status as a failure; it applies neither ``top_k`` nor the threshold itself.

Errors on this endpoint use Dify's shape ``{"error_code", "error_msg"}``: 1001 (403) a missing or
malformed ``Authorization`` header, 1002 (403) a key that is unknown, expired, revoked or lacks the
``search`` scope, 2001 (404) a ``knowledge_id`` that is not the id of one of the key's knowledge bases
(any string that is not a positive integer included). Every other error keeps its HTTP status and uses
that status as ``error_code`` (400 a bad body or filter, 429 rate limited, 503 no retriever can answer).

Scores (``records[].score``, what ``score_threshold`` compares against) are each hit's ``relevance``
(``retrieval.relevance``), raised where needed so that they never increase down the fused order: Dify
sorts records by score. A threshold of 0.0 (Dify's "off") or none takes the knowledge base's default
``score_threshold`` when it has one (set from an evaluation run's recommendation; 0.0 otherwise).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable
from typing import Any, cast

from django.core.cache import cache
from drf_spectacular.utils import extend_schema_field
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import api_exception_handler
from core.ratelimit import RateLimitedMixin
from core.redis import REDIS_ERRORS, warn_redis_unavailable
from knowledge.errors import KnowledgeBaseNotFound
from retrieval.access import key_access
from retrieval.cache import cached_search
from retrieval.errors import InvalidFilter
from retrieval.expansion import ExpansionOptions
from retrieval.selectors import default_score_threshold
from retrieval.serializers import MAX_QUERY_CHARS, QueryField
from retrieval.types import SearchHit, SearchRequest
from tenants.authentication import ApiKeyAuthentication, HasTenant
from tenants.models import Scope
from tenants.permissions import HasScope
from tenants.requests import TenantRequest

MAX_TOP_K = 100
MAX_CONDITIONS = 32
# Dify's ssrf_proxy resends a call that got 429/500/502/503/504 or timed out (5 s) unchanged, 3 times,
# after 0.5, 1 and 2 s: at most 3 x 5 + 3.5 s after the first.
DIFY_MAX_RETRIES = 3
RETRY_WINDOW_S = 30
# Dify's (status, error code) for the service's error codes; any other error keeps its status.
_DIFY_ERRORS = {
    "invalid_api_key": (403, 1002),
    "insufficient_scope": (403, 1002),
    "knowledge_base_not_found": (404, 2001),
}
_KB_ID = re.compile(r"[1-9][0-9]{0,18}")
_BUSINESS_FIELDS = ("doc_type", "doc_id", "created_at", "tags")
OPERATORS = (
    "contains", "not contains", "start with", "end with", "is", "is not", "empty", "not empty",
    "in", "not in", "=", "≠", ">", "<", "≥", "≤", "before", "after",
)  # fmt: skip
_NUMBER_COMPARISONS = {"=": "eq", "≠": "ne", ">": "gt", "<": "lt", "≥": "gte", "≤": "lte"}
_DATE_COMPARISONS = {"before": "lt", "after": "gt"}
_STRING_MATCHES = {"contains": "contains", "start with": "starts_with", "end with": "ends_with"}
# Operators each business field supports (filter operator, or a callable building the clause).
_FIELD_OPERATORS = {
    "doc_type": {"is": "eq", "is not": "ne", "=": "eq", "≠": "ne", "in": "in", "not in": "nin"},
    "doc_id": {"is": "eq", "is not": "ne", "=": "eq", "≠": "ne", "in": "in", "not in": "nin"},
    "created_at": {"is": "eq", "=": "eq", "before": "lt", "<": "lt", "≤": "lte", "after": "gt", ">": "gt", "≥": "gte"},
    "tags": {"contains": "contains", "is": "contains", "in": "any"},
}
_NEGATED = {"not contains": "contains", "is not": "is", "not in": "in", "not empty": "empty"}
_VALUELESS = ("empty", "not empty")


# --- request and response -----------------------------------------------------------------------


class RetrievalSettingInput(serializers.Serializer[Any]):
    top_k = serializers.IntegerField(min_value=1, max_value=MAX_TOP_K)
    score_threshold = serializers.FloatField(
        min_value=0, max_value=1, default=0.0, allow_null=True, help_text="0.0 when the threshold is off in Dify"
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "minLength": 1, "pattern": r"^[^\x00]*$"},
            {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1, "pattern": r"^[^\x00]*$"}},
        ],
        "description": "metadata field name, or a list of names (the condition holds for any)",
    }
)
class ConditionNameField(serializers.JSONField):
    """A field name or a non-empty list of them (checked in ``_condition``: anything else is a 400)."""


class ConditionInput(serializers.Serializer[Any]):
    name = ConditionNameField()
    comparison_operator = serializers.ChoiceField(choices=OPERATORS)
    value = serializers.JSONField(required=False, allow_null=True, help_text="omitted for empty / not empty")


class MetadataConditionInput(serializers.Serializer[Any]):
    logical_operator = serializers.ChoiceField(choices=("and", "or"), default="and", allow_null=True)
    # A ListField: ``ConditionInput(many=True, allow_null=True)`` would let each item be null too.
    conditions = serializers.ListField(
        child=ConditionInput(), max_length=MAX_CONDITIONS, required=False, allow_null=True,
        help_text="null or missing: no filter",
    )  # fmt: skip


@extend_schema_field(
    {
        "type": "string",
        "maxLength": 64,
        "pattern": r"^[^\x00]*$",
        "description": "the knowledge base id, as a string; any other string (blank too) names no knowledge base: 2001",
    }
)
class KnowledgeIdField(serializers.CharField):
    """Any string without NUL: one that is not an id of the key's KBs is Dify's 2001 (404), never a 400."""


class DifyRetrievalInput(serializers.Serializer[Any]):
    knowledge_id = KnowledgeIdField(max_length=64, allow_blank=True)
    query = QueryField(max_length=MAX_QUERY_CHARS, trim_whitespace=True)
    retrieval_setting = RetrievalSettingInput()
    metadata_condition = MetadataConditionInput(required=False, allow_null=True)


class DifyRecordOutput(serializers.Serializer[Any]):
    content = serializers.CharField()
    score = serializers.FloatField(help_text="in [0, 1]; see the module docs for its definition")
    title = serializers.CharField()
    metadata = serializers.DictField(
        help_text="the chunk's metadata with path, source, doc_id, chunk_id, kb_id, doc_type, document_id and "
        "document_name (what Dify cites the record by)"
    )


class DifyRetrievalOutput(serializers.Serializer[Any]):
    records = DifyRecordOutput(many=True)
    notes = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="only when a condition was skipped (no value)"
    )


class DifyErrorOutput(serializers.Serializer[Any]):
    error_code = serializers.IntegerField(help_text="1001, 1002, 2001, or the HTTP status for other errors")
    error_msg = serializers.CharField()


# --- the view -----------------------------------------------------------------------------------


class MalformedAuthorization(exceptions.PermissionDenied):
    """Dify's error 1001."""


class DifyApiKeyAuthentication(ApiKeyAuthentication):
    """Dify always sends ``Authorization: Bearer <key>``: anything else is error 1001."""

    def _raw_key(self, request: Request) -> str:
        header: str = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not value.strip():
            raise MalformedAuthorization("Invalid Authorization header format. Expected 'Bearer <api-key>' format.")
        return value.strip()


class DifyRetrievalView(RateLimitedMixin, APIView):
    """Hybrid search of one knowledge base, answered in Dify's record shape; limited and scoped like
    ``/api/v1/retrieval/hybrid``."""

    authentication_classes = [DifyApiKeyAuthentication]
    permission_classes = [HasTenant, HasScope]
    required_scope = Scope.SEARCH

    def rate_limit_endpoint(self, request: Request) -> str:
        return "hybrid"

    def counts_against_limit(self, request: Request) -> bool:
        return not is_dify_retry(cast(TenantRequest, request))  # limits count authenticated calls

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        return dify_exception_handler

    def post(self, request: TenantRequest) -> Response:
        if is_registration_probe(request):
            return Response({"records": []})  # the key was checked: Dify registers the endpoint
        params = DifyRetrievalInput(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        setting = data["retrieval_setting"]
        condition = data.get("metadata_condition")
        kb_id = knowledge_base_id(data["knowledge_id"])
        search_request = SearchRequest(
            query=data["query"],
            mode="hybrid",
            top_k=setting["top_k"],
            kb_ids=[kb_id],
            filters=filters_from_metadata_condition(condition),
            score_threshold=setting["score_threshold"] or default_score_threshold(request.tenant, kb_id),
            expand=ExpansionOptions(),
            **key_access(request.auth),  # Dify sends no user: a key bound to principals reads as them
        )
        hits = cached_search(request.tenant, search_request).response.results
        answer: dict[str, Any] = {
            "records": [record(hit, score) for hit, score in zip(hits, scores_in_fused_order(hits))]
        }
        if notes := skipped_condition_notes(condition):
            answer["notes"] = notes
        return Response(answer)


def is_registration_probe(request: Request) -> bool:
    """Dify checks a new endpoint with ``{"knowledge_id": "", "query": "", ...}`` (before 1.x: an empty
    POST) and refuses it on 403, 404 or 502: after the key's check, answered with no records."""
    if not request.body:
        return True
    data = request.data
    return isinstance(data, dict) and data.get("knowledge_id") == "" and data.get("query") == ""


def is_dify_retry(request: TenantRequest) -> bool:
    """The same key and body again within ``RETRY_WINDOW_S`` of the first, at most ``DIFY_MAX_RETRIES``
    times: Dify retrying a call (it ignores ``Retry-After``), which counts once against the limit."""
    key = f"dify:retry:{request.auth.pk}:{hashlib.sha256(request.body).hexdigest()}"
    try:
        return not cache.add(key, 0, timeout=RETRY_WINDOW_S) and cache.incr(key) <= DIFY_MAX_RETRIES
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("Dify retry detection", exc)
        return False


def dify_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The service's handler decides status and message; the body becomes Dify's shape."""
    response = api_exception_handler(exc, context)
    if response is None:
        return None
    error = response.data["error"]
    if isinstance(exc, MalformedAuthorization):
        status, error_code = 403, 1001
    else:
        status, error_code = _DIFY_ERRORS.get(error["code"], (response.status_code, response.status_code))
    response.status_code = status
    response.data = {"error_code": error_code, "error_msg": error["message"]}
    return response


def knowledge_base_id(knowledge_id: str) -> int:
    """Dify's ``knowledge_id`` is a string: the KB's id in digits; anything else names no knowledge base."""
    if not _KB_ID.fullmatch(knowledge_id) or int(knowledge_id) >= 2**63:
        raise KnowledgeBaseNotFound(f"The knowledge does not exist: {knowledge_id!r} is not a knowledge base id.")
    return int(knowledge_id)


def scores_in_fused_order(hits: list[SearchHit]) -> list[float]:
    """Each hit's relevance, raised to the highest one ranked below it: Dify sorts records by score
    (stably), so it keeps the fused order, and no score falls under the threshold its hit passed."""
    scores, floor = [], 0.0
    for hit in reversed(hits):
        floor = max(floor, hit.relevance)
        scores.append(floor)
    return scores[::-1]


def record(hit: SearchHit, score: float) -> dict[str, Any]:
    """Dify cites a record by ``metadata.document_id`` (else by its title, merging same-titled documents)."""
    title = hit.title or hit.source_uri
    metadata = {
        **hit.metadata,
        "path": hit.source_uri,
        "source": hit.source_uri,
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "kb_id": hit.kb_id,
        "doc_type": hit.doc_type,
        "document_id": str(hit.doc_id),
        "document_name": title,
    }
    return {"content": hit.content, "score": score, "title": title, "metadata": metadata}


# --- metadata_condition -> the filter language ------------------------------------------------------


def filters_from_metadata_condition(condition: dict[str, Any] | None) -> dict[str, Any] | None:
    """Dify's conditions as a filter (``retrieval.filters``): ``doc_type``, ``doc_id``, ``created_at`` and
    ``tags`` are the chunk's fields, any other name is ``metadata.<name>``; a condition without a value
    is skipped, as Dify's own knowledge bases do. Raises ``InvalidFilter``."""
    clauses = [
        _condition(item, path=f"metadata_condition.conditions[{i}]")
        for i, item in enumerate((condition or {}).get("conditions") or [])
        if _has_value(item)
    ]
    return {(condition or {}).get("logical_operator") or "and": clauses} if clauses else None


def skipped_condition_notes(condition: dict[str, Any] | None) -> list[str]:
    return [
        f"metadata_condition.conditions[{i}] ({item['comparison_operator']!r} on {item['name']!r}) "
        "has no value: skipped"
        for i, item in enumerate((condition or {}).get("conditions") or [])
        if not _has_value(item)
    ]


def _has_value(item: dict[str, Any]) -> bool:
    """Dify's manual filter sends ``value: null`` for a blank field; only ``empty`` / ``not empty`` need none."""
    return item.get("value") is not None or item["comparison_operator"] in _VALUELESS


def _condition(item: dict[str, Any], *, path: str) -> dict[str, Any]:
    names = item["name"] if isinstance(item["name"], list) else [item["name"]]
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidFilter(f"{path}.name: expected a field name or a non-empty list of names")
    operator, value = item["comparison_operator"], item.get("value")
    clauses = [_clause(name, operator, value, path=path) for name in names]
    return clauses[0] if len(clauses) == 1 else {"or": clauses}


def _clause(name: str, operator: str, value: Any, *, path: str) -> dict[str, Any]:
    if operator in _NEGATED:
        return {"not": _clause(name, _NEGATED[operator], value, path=path)}
    if name in _BUSINESS_FIELDS:
        return _field_clause(name, operator, value, path=path)
    key = f"metadata.{name}"
    if operator == "empty":
        return {"or": [{key: {"exists": False}}, {key: ""}, {key: None}]}
    if operator in _STRING_MATCHES:
        return {key: {_STRING_MATCHES[operator]: _text(value, path)}}
    if operator == "is":
        return {key: value}
    if operator == "in":
        return {key: {"in": _values(value, path)}}
    if operator in _NUMBER_COMPARISONS:
        return {key: {_NUMBER_COMPARISONS[operator]: _number(value, path)}}
    return {key: {_DATE_COMPARISONS[operator]: value}}  # before / after: strings lexically, numbers numerically


def _field_clause(name: str, operator: str, value: Any, *, path: str) -> dict[str, Any]:
    filter_operator = _FIELD_OPERATORS[name].get(operator)
    if filter_operator is None:
        raise InvalidFilter(f"{path}: operator {operator!r} does not apply to {name!r}")
    if filter_operator in ("in", "nin", "any"):
        value = _values(value, path)
    if name == "doc_id":
        value = [_integer(item, path) for item in value] if isinstance(value, list) else _integer(value, path)
    elif name == "created_at" and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = _from_unix_seconds(value, path)
    return {name: {filter_operator: value}}


def _values(value: Any, path: str) -> list[Any]:
    """A list, or a comma-separated string (Dify's UI sends ``in`` values either way)."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, list):
        return value
    raise InvalidFilter(f"{path}.value: expected a list or a comma-separated string")


def _text(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidFilter(f"{path}.value: expected a string")
    return str(value)


def _number(value: Any, path: str) -> int | float:
    """Numeric comparisons take numbers, or strings that spell one (Dify's values are often strings)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                pass
    raise InvalidFilter(f"{path}.value: expected a number, got {value!r}")


def _integer(value: Any, path: str) -> int:
    number = _number(value, path)
    if not isinstance(number, int):
        raise InvalidFilter(f"{path}.value: expected an integer id, got {value!r}")
    return number


def _from_unix_seconds(value: float, path: str) -> str:
    try:
        return dt.datetime.fromtimestamp(value, tz=dt.UTC).isoformat()
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidFilter(f"{path}.value: {value!r} is not a Unix timestamp") from exc
