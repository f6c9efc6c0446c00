import json
import time
from typing import Any

from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from core.cost import request_cost
from core.fields import validated_body
from core.idempotency import IdempotentPostMixin
from core.ratelimit import RateLimitedMixin
from core.replicas import search_reads
from core.request_id import request_id_of
from knowledge.selectors.search import searched_knowledge
from retrieval.access import key_access
from retrieval.cache import cached_search
from retrieval.expansion import ExpansionOptions
from retrieval.graph_serializers import GraphSearchInput
from retrieval.serializers import ModeSearchInput, SearchInput
from retrieval.services.community_search import GlobalGraphRequest, global_graph_search
from retrieval.types import MODES, QueryVector, SearchRequest
from tenants.authentication import HasTenant
from tenants.models import ApiKey, Scope
from tenants.permissions import HasScope
from tenants.requests import TenantRequest

DEFAULT_MODE = "hybrid"  # of /search when the body names none (ModeSearchInput's default)


class AnsweredSearch(HttpResponse):
    """A search's rendered answer, with ``data``: what middleware reads of it (core.metrics)."""

    data: dict[str, Any]


class SearchView(IdempotentPostMixin, RateLimitedMixin, APIView):
    """``POST /api/v1/retrieval/search``: one endpoint, ``mode`` = vector | bm25 | hybrid | graph."""

    input_serializer: type[Serializer[Any]] = ModeSearchInput
    mode: str | None = None
    permission_classes = [HasTenant, HasScope]
    required_scope = Scope.SEARCH

    def rate_limit_endpoint(self, request: Request) -> str:
        """Limits count per search mode, whichever endpoint carries it: ``/search`` in hybrid mode is hybrid."""
        return self.mode or _requested_mode(request.body)

    def post(self, request: TenantRequest) -> HttpResponse:
        started = time.perf_counter()
        return self.respond(request, validated_body(request, self.input_serializer), started)

    def respond(self, request: TenantRequest, data: dict[str, Any], started: float) -> HttpResponse:
        """The answer to a validated body: SearchOutput's shape (the documented schema; tests hold the body
        to it), rendered by the cache's entry (a hit's bytes are sent as stored, its fields joined on)."""
        mode = data.pop("mode", self.mode)
        search_request = search_request_of(data, mode, request.auth)
        with search_reads(request.tenant.pk):  # a read replica that has the tenant's last write, or the primary
            # What the search reads first (its versions, the vocabulary stamp): the cache key and the search's.
            knowledge = searched_knowledge(request.tenant, search_request.kb_ids, search_request.reachable_kb_ids)
            outcome = cached_search(request.tenant, search_request, knowledge)
        fields = {
            "cached": outcome.cached,
            **({"cache": outcome.semantic.as_dict()} if outcome.semantic else {}),
            "total": outcome.total,
            "cost": request_cost(),
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
            "request_id": request_id_of(request),
        }
        response = AnsweredSearch(outcome.rendered(**fields), content_type="application/json")
        # What middleware reads of a search's answer (core.metrics: the served query's counters).
        degraded = [] if outcome.cached else outcome.response.degraded
        served = search_request.query if outcome.semantic else outcome.query  # a semantic hit's is another's
        response.data = {**fields, "mode": mode, "queries": [{"text": served}], "degraded": degraded}
        return response


class VectorSearchView(SearchView):
    """``POST /api/v1/retrieval/vector``: dense search over the caller's knowledge bases."""

    input_serializer = SearchInput
    mode = "vector"


class Bm25SearchView(SearchView):
    """``POST /api/v1/retrieval/bm25``: keyword search; never loads or calls the embedder."""

    input_serializer = SearchInput
    mode = "bm25"


class HybridSearchView(SearchView):
    """``POST /api/v1/retrieval/hybrid``: BM25 and dense lists (and the graph's) fused as the request, its
    knowledge bases or the service's defaults say (``retrieval.tuning``)."""

    input_serializer = SearchInput
    mode = "hybrid"


class GraphSearchView(SearchView):
    """``POST /api/v1/retrieval/graph``: passages reached from the query's entities (never embeds);
    with ``"scope": "global"``, the knowledge bases' communities ranked by their summaries (BM25 and cosine: the
    query is embedded; uncached)."""

    input_serializer = GraphSearchInput
    mode = "graph"

    def respond(self, request: TenantRequest, data: dict[str, Any], started: float) -> HttpResponse:
        scope, level = data.pop("scope"), data.pop("level")
        if scope == "local":
            return super().respond(request, data, started)
        response = global_graph_search(
            request.tenant,
            GlobalGraphRequest(
                query=data["query"],
                top_k=data["top_k"],
                kb_ids=data.get("kb_ids"),
                level=level,
                filters=data.get("filters"),
                **key_access(request.auth, data.get("principals")),
            ),
        )
        latency_ms = round((time.perf_counter() - started) * 1000, 2)
        body = {**response.as_dict(), "cost": request_cost(), "latency_ms": latency_ms}
        answer = AnsweredSearch(JSONRenderer().render({**body, "request_id": request_id_of(request)}))
        answer["Content-Type"] = "application/json"
        # What middleware reads of a search's answer (core.metrics: counted as a graph query served).
        answer.data = {**body, "mode": self.mode, "queries": [{"text": data["query"]}]}
        return answer


def search_request_of(data: dict[str, Any], mode: str, api_key: ApiKey) -> SearchRequest:
    """The search a validated ``SearchInput`` body asks for (``mode`` popped from it), read as ``api_key``'s
    reader and within its knowledge bases (``key_access``): the REST endpoints', the MCP ``search`` tool's
    and the OpenAI-compatible search's one way from a body to ``cached_search``."""
    data = dict(data)
    expand = data.pop("expand", None)
    given = data.pop("query_vector", None)
    access = key_access(api_key, data.pop("principals", None))
    return SearchRequest(
        **data,
        **access,
        mode=mode,
        expand=ExpansionOptions(**expand) if expand else ExpansionOptions(),
        query_vector=QueryVector(given["model"], tuple(given["values"])) if given else None,
    )


def _requested_mode(body: bytes) -> str:
    """The mode a ``/search`` body asks for, read before validation; anything unusable is the default."""
    try:
        mode = json.loads(body).get("mode", DEFAULT_MODE)
    except (ValueError, AttributeError, RecursionError):  # the parser answers these bodies with a 400
        return DEFAULT_MODE
    return mode if mode in MODES else DEFAULT_MODE
