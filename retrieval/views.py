import io
import time

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.response import Response
from rest_framework.utils import json
from rest_framework.views import APIView

from core.errors import DomainError
from core.parsers import StrictJSONParser
from retrieval.cache import CacheProbe, cached_search, search_cache_key
from retrieval.expansion import ExpansionOptions
from core.idempotency import IdempotentPostMixin
from core.request_id import request_id_of
from core.ratelimit import RateLimitedMixin
from retrieval.types import MODES, SearchRequest
from retrieval.serializers import GraphSearchInput, ModeSearchInput, SearchInput
from retrieval.services.communities import GlobalGraphRequest, global_graph_search
from tenants.authentication import HasTenant
from tenants.models import Scope
from tenants.permissions import HasScope

DEFAULT_MODE = "hybrid"  # of /search when the body names none (ModeSearchInput's default)


class SearchView(IdempotentPostMixin, RateLimitedMixin, APIView):
    """``POST /api/v1/retrieval/search``: one endpoint, ``mode`` = vector | bm25 | hybrid | graph."""

    input_serializer = ModeSearchInput
    mode: str | None = None
    permission_classes = [HasTenant, HasScope]
    required_scope = Scope.SEARCH

    def initial(self, request, *args, **kwargs) -> None:
        self.started = time.perf_counter()
        self.planned: tuple[dict, str] | None = None  # the validated body and its cache key, from rate_limit_reads
        super().initial(request, *args, **kwargs)

    def rate_limit_endpoint(self, request) -> str:
        """Limits count per search mode, whichever endpoint carries it: ``/search`` in hybrid mode is hybrid."""
        return self.mode or _requested_mode(request.body)

    def rate_limit_reads(self, request) -> list[str]:
        """The key of this search's cached answer, read in the round trip that counts the call: a
        cache hit costs one Redis round trip. Only for a JSON body that validates (anything else is
        left to ``post``, which answers it as before) and a search the cache keeps."""
        if settings.SEARCH_CACHE_TTL_S <= 0 or request.content_type.split(";")[0].strip() != "application/json":
            return []
        try:
            body = StrictJSONParser().parse(io.BytesIO(request.body), parser_context=request.parser_context)
        except (ParseError, RequestDataTooBig):
            return []
        params = self.input_serializer(data=body)
        if not params.is_valid():
            return []
        data = dict(params.validated_data)
        search_request = self.search_request_of(dict(data))
        if search_request is None:
            return []
        try:
            key = search_cache_key(request.tenant, search_request)
        except DomainError:  # e.g. an unknown KB: the search answers it after the permission checks
            return []
        self.planned = (data, key)
        return [key]

    def post(self, request):
        if self.planned is not None:
            data = self.planned[0]
        else:
            params = self.input_serializer(data=request.data)
            params.is_valid(raise_exception=True)
            data = dict(params.validated_data)
        return self.respond(request, data)

    def search_request_of(self, data: dict) -> SearchRequest | None:
        """The search a validated body asks for (None: not one the result cache keeps); takes ``data`` apart."""
        expand = data.pop("expand", None)
        mode = data.pop("mode", self.mode)
        return SearchRequest(**data, mode=mode, expand=ExpansionOptions(**expand) if expand else ExpansionOptions())

    def respond(self, request, data: dict) -> Response:
        """The answer to a validated body."""
        search_request = self.search_request_of(dict(data))
        probe = None
        if self.planned is not None and self.planned[1] in self.read_along:
            probe = CacheProbe(self.planned[1], self.read_along[self.planned[1]])
        outcome = cached_search(request.tenant, search_request, probe)
        response = outcome.response
        body = {
            **response.as_dict(),
            "cached": outcome.cached,
            "total": len(response.results),
            "latency_ms": round((time.perf_counter() - self.started) * 1000, 2),
            "request_id": request_id_of(request),
        }
        # Already SearchOutput's shape (the documented schema; tests hold the body to it): rendering it
        # through the serializer would copy its nested fields per request, a third of a cached answer.
        return Response(body)


class VectorSearchView(SearchView):
    """``POST /api/v1/retrieval/vector``: dense search over the caller's knowledge bases."""

    input_serializer = SearchInput
    mode = "vector"


class Bm25SearchView(SearchView):
    """``POST /api/v1/retrieval/bm25``: keyword search; never loads or calls the embedder."""

    input_serializer = SearchInput
    mode = "bm25"


class HybridSearchView(SearchView):
    """``POST /api/v1/retrieval/hybrid``: BM25 and dense lists (and the graph's) fused by weighted RRF."""

    input_serializer = SearchInput
    mode = "hybrid"


class GraphSearchView(SearchView):
    """``POST /api/v1/retrieval/graph``: passages reached from the query's entities (never embeds);
    with ``"scope": "global"``, the knowledge bases' communities ranked by their summaries (uncached)."""

    input_serializer = GraphSearchInput
    mode = "graph"

    def search_request_of(self, data: dict) -> SearchRequest | None:
        scope, level = data.pop("scope"), data.pop("level")
        return super().search_request_of(data) if scope == "local" else None

    def respond(self, request, data: dict) -> Response:
        if data["scope"] == "local":
            return super().respond(request, data)
        response = global_graph_search(
            request.tenant,
            GlobalGraphRequest(
                query=data["query"],
                top_k=data["top_k"],
                kb_ids=data.get("kb_ids"),
                level=data["level"],
                filters=data.get("filters"),
            ),
        )
        latency_ms = round((time.perf_counter() - self.started) * 1000, 2)
        return Response({**response.as_dict(), "latency_ms": latency_ms, "request_id": request_id_of(request)})


def _requested_mode(body: bytes) -> str:
    """The mode a ``/search`` body asks for, read before validation; anything unusable is the default."""
    try:
        mode = json.loads(body).get("mode", DEFAULT_MODE)
    except (ValueError, AttributeError, RecursionError):  # the parser answers these bodies with a 400
        return DEFAULT_MODE
    return mode if mode in MODES else DEFAULT_MODE
