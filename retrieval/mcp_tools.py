"""What the MCP server's tools do (:mod:`retrieval.mcp_server` wires them to the SDK), whatever the transport.

Each call is checked as a REST call is: the API key (``Bearer`` header over HTTP, ``--key`` over stdio) must be
usable and carry the ``search`` scope, and the call counts against the key's rate tier on the counter of the
REST endpoint it stands for (a search on its mode's, as ``/api/v1/retrieval/<mode>``; the other tools on
``knowledge``, as the knowledge-base reads). Searches go through the one entry point the REST API uses
(``search_request_of`` then ``cached_search``), so the ranking, cache, analytics and every access rule the
search applies (tenant, and later document readers) hold here too. Errors are :class:`DomainError`\\ s with
the service's codes; the server turns them into MCP tool errors.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.conf import settings
from rest_framework import status

from core.errors import DomainError, _validation_message
from core.ratelimit import ANONYMOUS, RateLimitUsage, count_call
from knowledge.selectors.api import document_of, knowledge_base_of, knowledge_bases_of
from knowledge.serializers import DocumentOutput, KnowledgeBaseOutput
from retrieval.cache import cached_search
from retrieval.errors import PassageNotFound
from retrieval.selectors import default_score_threshold, passage_with_context
from retrieval.serializers import ModeSearchInput
from retrieval.types import SearchHit
from retrieval.views import search_request_of
from tenants.models import ApiKey, Scope
from tenants.permissions import InsufficientScope
from tenants.selectors import api_key_for
from tenants.services import record_api_key_use

KNOWLEDGE_ENDPOINT = "knowledge"  # the rate-limit counter of the knowledge-base reads
MAX_DOCUMENT_PASSAGES = 100


class MissingApiKey(DomainError):
    status_code = status.HTTP_401_UNAUTHORIZED
    code = "missing_api_key"


class InvalidApiKey(DomainError):
    """403, as on the REST API: the caller sent a key that is not (or no longer) valid."""

    status_code = status.HTTP_403_FORBIDDEN
    code = "invalid_api_key"


class RateLimited(DomainError):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    code = "rate_limited"


class InvalidArguments(DomainError):
    code = "invalid_request"


def authenticated(raw_key: str | None) -> ApiKey:
    """The usable key ``raw_key`` names, with the ``search`` scope; else the REST API's 401/403 error."""
    if not raw_key:
        raise MissingApiKey("Authentication credentials were not provided: send 'Authorization: Bearer <api key>'.")
    api_key = api_key_for(raw_key)
    if api_key is None:
        raise InvalidApiKey("The API key is invalid, expired or revoked.")
    if not api_key.has_scope(Scope.SEARCH):
        raise InsufficientScope("This API key lacks the 'search' scope.", details={"required_scope": Scope.SEARCH})
    record_api_key_use(api_key)
    return api_key


def count_anonymous(address: str) -> None:
    """A call without a usable key, on the caller's address's counter (``RATE_LIMIT_ANONYMOUS``), as the REST
    API counts them; over the limit it is refused with a 429 instead of its 401/403."""
    usage = count_call(SimpleNamespace(auth=None, META={"REMOTE_ADDR": address}), ANONYMOUS)  # type: ignore[arg-type]
    _refuse_if_exceeded(usage, "unauthenticated")


def count_against_limit(api_key: ApiKey, endpoint: str) -> None:
    """One call on the key's ``endpoint`` counter (``core.ratelimit``, shared with the REST API)."""
    usage = count_call(SimpleNamespace(auth=api_key, META={}), endpoint)  # type: ignore[arg-type]  # what it reads
    _refuse_if_exceeded(usage, endpoint)


def _refuse_if_exceeded(usage: RateLimitUsage | None, what: str) -> None:
    if usage is not None and usage.exceeded:
        error = RateLimited(
            f"Rate limit of {usage.limit} {what} requests per {settings.RATE_LIMIT_WINDOW_S} s exceeded.",
            details={"retry_after_s": usage.reset_s},
        )
        error.retry_after_s = usage.reset_s
        raise error


# --- the tools ------------------------------------------------------------------------------------


def search(api_key: ApiKey, arguments: dict[str, Any]) -> dict[str, Any]:
    """The ``search`` tool: a body of ``/api/v1/retrieval/search``, answered with citable hits."""
    params = ModeSearchInput(data={key: value for key, value in arguments.items() if value is not None})
    if not params.is_valid():
        raise InvalidArguments(_validation_message(params.errors), details=params.errors)
    data = dict(params.validated_data)
    mode = data.pop("mode")
    count_against_limit(api_key, mode)
    kb_ids = data.get("kb_ids") or []
    if not data.get("score_threshold") and len(kb_ids) == 1:  # one KB searched: its own default threshold
        data["score_threshold"] = default_score_threshold(api_key.tenant, kb_ids[0])
    search_request = search_request_of(data, mode, api_key)
    outcome = cached_search(api_key.tenant, search_request)
    response = outcome.response
    answer: dict[str, Any] = {
        "query": search_request.query,
        "mode": mode,
        "total": len(response.results),
        "results": [citable_hit(hit) for hit in response.results],
    }
    if not outcome.cached and response.degraded:
        answer["degraded"] = response.degraded
    if response.notes:
        answer["notes"] = response.notes
    return answer


def citable_hit(hit: SearchHit) -> dict[str, Any]:
    """A hit as a model can quote and cite it: the passage, where it is from, and how well it matched."""
    page = hit.metadata.get("page") if isinstance(hit.metadata, dict) else None
    where = ", ".join(part for part in (hit.section and f"section {hit.section}", page and f"page {page}") if part)
    return {
        "rank": hit.rank,
        "chunk_id": hit.chunk_id,
        "doc_id": hit.doc_id,
        "kb_id": hit.kb_id,
        "title": hit.title,
        "source_uri": hit.source_uri,
        "section": hit.section,
        "page": page,
        "score": hit.score,
        "relevance": hit.relevance,
        "content": hit.content,
        "citation": f"{hit.title or hit.source_uri} ({hit.source_uri}{', ' + where if where else ''})",
        "metadata": hit.metadata,
    }


def list_knowledge_bases(api_key: ApiKey) -> dict[str, Any]:
    count_against_limit(api_key, KNOWLEDGE_ENDPOINT)
    kbs = knowledge_bases_of(api_key.tenant, api_key.reachable_kb_ids, api_key.listing_reader())
    return {"knowledge_bases": KnowledgeBaseOutput(kbs, many=True).data}


def get_passage(api_key: ApiKey, chunk_id: int) -> dict[str, Any]:
    count_against_limit(api_key, KNOWLEDGE_ENDPOINT)
    passage = passage_with_context(
        api_key.tenant, chunk_id, reachable=api_key.reachable_kb_ids, reader=api_key.listing_reader()
    )
    if passage is None:
        raise PassageNotFound(f"no passage {chunk_id} in this tenant's knowledge bases", details={"chunk_id": chunk_id})
    return passage


def get_document(api_key: ApiKey, kb_id: int, document_id: int, max_passages: int = 20) -> dict[str, Any]:
    if not 0 <= max_passages <= MAX_DOCUMENT_PASSAGES:
        raise InvalidArguments(f"max_passages: must be between 0 and {MAX_DOCUMENT_PASSAGES}.")
    count_against_limit(api_key, KNOWLEDGE_ENDPOINT)
    reader = api_key.listing_reader()
    kb = knowledge_base_of(api_key.tenant, kb_id, api_key.reachable_kb_ids, reader)
    document = document_of(kb, document_id, reader)
    passages = list(document.chunks.filter(kb_version_id=kb.active_version_id).order_by("ordinal")[: max_passages + 1])
    return {
        **DocumentOutput(document).data,
        "kb_id": kb.pk,
        "source_uri": document.source_uri,
        "passages": [
            {
                "chunk_id": chunk.pk,
                "ordinal": chunk.ordinal,
                "section": (chunk.metadata or {}).get("section"),
                "page": (chunk.metadata or {}).get("page"),
                "content": chunk.content,
            }
            for chunk in passages[:max_passages]
        ],  # fmt: skip
        "more_passages": len(passages) > max_passages,
    }
