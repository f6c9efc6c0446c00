import time

from rest_framework.response import Response
from rest_framework.views import APIView

from retrieval.middleware import request_id_of
from retrieval.selectors import vector_search
from retrieval.serializers import SearchOutput, VectorSearchInput


class VectorSearchView(APIView):
    """``POST /api/v1/retrieval/vector``: dense search over the caller's knowledge bases."""

    def post(self, request):
        started = time.perf_counter()
        params = VectorSearchInput(data=request.data)
        params.is_valid(raise_exception=True)
        hits = vector_search(tenant=request.tenant, **params.validated_data)
        output = SearchOutput(
            {
                "results": hits,
                "total": len(hits),
                "latency_ms": round((time.perf_counter() - started) * 1000, 2),
                "request_id": request_id_of(request),
            }
        )
        return Response(output.data)
