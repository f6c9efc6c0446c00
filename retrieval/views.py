import time
from dataclasses import asdict

from rest_framework.response import Response
from rest_framework.views import APIView

from retrieval.expansion import ExpansionOptions
from retrieval.middleware import request_id_of
from retrieval.selectors import SearchRequest, search
from retrieval.serializers import ModeSearchInput, SearchInput, SearchOutput


class SearchView(APIView):
    """``POST /api/v1/retrieval/search``: one endpoint, ``mode`` = vector | bm25 | hybrid."""

    input_serializer = ModeSearchInput
    mode: str | None = None

    def post(self, request):
        started = time.perf_counter()
        params = self.input_serializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = dict(params.validated_data)
        expand = data.pop("expand", None)
        mode = data.pop("mode", self.mode)
        search_request = SearchRequest(
            **data, mode=mode, expand=ExpansionOptions(**expand) if expand else ExpansionOptions()
        )
        response = search(request.tenant, search_request)
        body = {
            **asdict(response),
            "total": len(response.results),
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
            "request_id": request_id_of(request),
        }
        return Response(SearchOutput(body).data)


class VectorSearchView(SearchView):
    """``POST /api/v1/retrieval/vector``: dense search over the caller's knowledge bases."""

    input_serializer = SearchInput
    mode = "vector"


class Bm25SearchView(SearchView):
    """``POST /api/v1/retrieval/bm25``: keyword search; never loads or calls the embedder."""

    input_serializer = SearchInput
    mode = "bm25"


class HybridSearchView(SearchView):
    """``POST /api/v1/retrieval/hybrid``: BM25 and dense lists fused by weighted RRF."""

    input_serializer = SearchInput
    mode = "hybrid"
