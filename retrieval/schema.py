"""OpenAPI documentation of the API (drf-spectacular): security schemes, error shapes and examples.

The search views are documented here (shared error shapes: ``core.schema``) through an ``OpenApiViewExtension`` rather than decorators on
the views, so the documentation (long examples) stays out of the request path's code. Extensions
register on import: ``RetrievalConfig.ready`` imports this module.
"""

from __future__ import annotations

import math
from typing import Any

from django.http import HttpResponse
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiViewExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework.response import Response
from rest_framework.views import APIView

from core.schema import BEARER_SCHEME, IDEMPOTENCY_KEY_HEADER, REQUEST_ID, cost_example, error_responses
from retrieval.graph_serializers import GlobalGraphOutput
from retrieval.serializers import SearchOutput
from retrieval.tuning import DEFAULT_FUSION
from tenants.requests import TenantRequest

SEARCH_ERRORS = (400, 401, 403, 404, 409, 413, 415, 422, 429, 503)
SEARCH_HEADERS = [
    IDEMPOTENCY_KEY_HEADER,
    OpenApiParameter(
        "X-Request-ID",
        str,
        OpenApiParameter.HEADER,
        description="Your id for this request (1-128 of letters, digits and . _ : -), echoed in the response "
        "header, error bodies and logs; generated when absent.",
    ),
]

HIT_EXAMPLE: dict[str, Any] = {
    "chunk_id": 101,
    "doc_id": 17,
    "kb_id": 1,
    "content": "Storage: keep the PPR-9087-BAT pack between 10 and 25 °C, charged to about 50 % ...",
    "score": 1.912871,
    "source": "hybrid",
    "rank": 1,
    "title": "PPR-9087 battery safety datasheet",
    "source_uri": "sample_kb/products/safety-datasheet-ppr-9087-battery.pdf",
    "doc_type": "pdf",
    "metadata": {"page": 1, "shop_id": 102, "lang": "en", "tags": ["safety", "en"], "ordinal": 0},
    "section": None,
    "relevance": 0.562,
    "fused_score": 1.912871,
    "rerank_score": None,
    "retrievers": {
        "vector": {"rank": 1, "score": 0.613, "query": "How should I store the lithium battery pack?"},
        "bm25": {"rank": 2, "score": 11.92, "query": "How should I store the lithium battery pack?"},
    },
    "matched_queries": ["How should I store the lithium battery pack?"],
    "parent_id": None,
    "children": None,
}
RESPONSE_EXAMPLE: dict[str, Any] = {
    "results": [HIT_EXAMPLE],
    "total": 1,
    "mode": "hybrid",
    "queries": [{"text": "How should I store the lithium battery pack?", "weight": 1.0, "origin": "original"}],
    "weights": {"vector": 1.0, "bm25": 1.0, "graph": 0.0},
    "reranked": False,
    "degraded": [],
    "notes": [],
    "notices": [],
    "candidates": {"vector": 50, "bm25": 23, "fused": 61},
    "timings_ms": {"expand": 0.4, "bm25": 2.7, "embed": 14.8, "vector": 2.3, "fuse": 0.6, "total": 19.9},
    "critical_path_ms": {"expand": 0.4, "bm25": 0.9, "vector": 2.3, "embed": 11.9, "fuse": 0.6, "rest": 3.8},
    "cost": cost_example(embedding_tokens=12, embedding_calls=1, cpu_ms=17.85),
    "latency_ms": 21.4,
    "request_id": REQUEST_ID,
}


GRAPH_CONTRIBUTION = {
    "rank": 4,
    "score": 1.27,
    "query": "Which battery pack does the PPR-9087 use?",
    "entities": ["Battery Pack", "PPR-9087"],
    "path": ["PPR-9087", "uses", "锂电池"],
    "hops": 1,
}
GRAPH_HIT_EXAMPLE = {
    **HIT_EXAMPLE,
    "content": "基本信息\n\n型号：PPR-9087\n售价：1699 元（含标准上门安装一次）\n保修：锁体及电子部件 36 个月 ...",
    "title": "PortaLock Pro 智能门锁（PPR-9087）产品介绍",
    "source_uri": "sample_kb/products/ppr-9087-smart-lock.md",
    "doc_type": "md",
    "rank": 4,
    "source": "graph",
    "score": GRAPH_CONTRIBUTION["score"],
    "retrievers": {"graph": GRAPH_CONTRIBUTION},
    "matched_queries": [GRAPH_CONTRIBUTION["query"]],
}


def response_example(mode: str) -> dict[str, Any]:
    """The sample answer as ``mode`` returns it: one retriever's list shows that list's raw score."""
    if mode == "hybrid":
        return RESPONSE_EXAMPLE
    if mode == "graph":
        return {
            **RESPONSE_EXAMPLE,
            "results": [GRAPH_HIT_EXAMPLE],
            "mode": "graph",
            "queries": [{"text": GRAPH_CONTRIBUTION["query"], "weight": 1.0, "origin": "original"}],
            "weights": {"vector": 0.0, "bm25": 0.0, "graph": 1.0},
            "timings_ms": {"expand": 0.3, "graph": 4.1, "fuse": 0.4, "total": 5.2},
            "critical_path_ms": {"expand": 0.3, "graph": 4.1, "fuse": 0.4, "rest": 0.4},
            "candidates": {"graph": 40, "fused": 40},
        }
    contribution = HIT_EXAMPLE["retrievers"][mode]
    skipped = {"vector": {"bm25"}, "bm25": {"embed", "vector"}}[mode]
    hit = {**HIT_EXAMPLE, "source": mode, "score": contribution["score"], "retrievers": {mode: contribution}}
    return {
        **RESPONSE_EXAMPLE,
        "results": [hit],
        "mode": mode,
        "weights": {retriever: float(retriever == mode) for retriever in ("vector", "bm25", "graph")},
        "timings_ms": {stage: ms for stage, ms in RESPONSE_EXAMPLE["timings_ms"].items() if stage not in skipped},
        "critical_path_ms": {
            stage: ms for stage, ms in RESPONSE_EXAMPLE["critical_path_ms"].items() if stage not in skipped
        },
        "candidates": {mode: RESPONSE_EXAMPLE["candidates"][mode], "fused": RESPONSE_EXAMPLE["candidates"][mode]},
    }


GLOBAL_EXAMPLE = {
    "scope": "global",
    "communities": [
        {
            "kb_id": 1,
            "level": 0,
            "number": 2,
            "parent": None,
            "rank": 1,
            "score": 0.032787,
            "summary": "Key entities: PPR-9087, battery pack, recall, 锂电池. The PPR-9087-BAT battery pack was "
            "recalled after overheating reports ...",
            "key_entities": ["PPR-9087", "battery pack", "recall", "锂电池"],
            "size": 14,
            "retrievers": {"bm25": {"rank": 1, "score": 7.41}, "vector": {"rank": 1, "score": 0.512}},
            "chunks": [
                {
                    "chunk_id": 101,
                    "doc_id": 17,
                    "title": HIT_EXAMPLE["title"],
                    "source_uri": HIT_EXAMPLE["source_uri"],
                    "content": HIT_EXAMPLE["content"],
                }
            ],
        }
    ],
    "total": 1,
    "candidates": 9,
    "degraded": [],
    "timings_ms": {"graph": 1.2, "bm25": 0.4, "vector": 15.1, "fuse": 0.1, "hydrate": 1.9, "total": 18.9},
    "cost": cost_example(embedding_tokens=14, embedding_calls=1, cpu_ms=16.2),
    "latency_ms": 20.3,
    "request_id": REQUEST_ID,
}
GRAPH_OUTPUT = PolymorphicProxySerializer(
    component_name="GraphOutput",
    serializers=[SearchOutput, GlobalGraphOutput],
    resource_type_field_name=None,
)

DEGRADED_EXAMPLE = {
    **RESPONSE_EXAMPLE,
    "results": [{**HIT_EXAMPLE, "retrievers": {"vector": HIT_EXAMPLE["retrievers"]["vector"]}}],
    "degraded": [{"stage": "bm25", "cause": "connection_error", "message": "cannot reach Elasticsearch (search): ..."}],
    "candidates": {"vector": 50, "fused": 50},
}

# A request example the service accepts as it stands (a schema example is a valid request: issue 51): as many
# values as the documented model makes, none of them real.
EXAMPLE_QUERY_VECTOR = [round(math.sin(0.7 * i) / 13.86, 4) for i in range(384)]

REQUEST_EXAMPLES: dict[str | None, list[tuple[str, dict[str, Any]]]] = {
    "vector": [
        ("Dense search", {"query": "How should I store the lithium battery pack?", "top_k": 3}),
        (
            "Pre-filtered",
            {"query": "how do I install the smart lock", "top_k": 5,
             "filters": {"doc_type": {"in": ["pdf", "md"]}, "metadata.shop_id": 102}},
        ),
        (
            "Own query vector (all-MiniLM-L6-v2's 384 values; these are made up, yours come from the model)",
            {"query": "How should I store the lithium battery pack?", "top_k": 3,
             "query_vector": {"model": "all-MiniLM-L6-v2", "values": EXAMPLE_QUERY_VECTOR}},
        ),
    ],
    "bm25": [("Identifier lookup", {"query": "PPR-9087", "top_k": 5})],
    "hybrid": [
        ("Hybrid", {"query": "退货政策是什么", "top_k": 5}),
        (
            "Weighted and reranked",
            {"query": "battery storage temperature", "top_k": 5, "weights": {"vector": 0.7, "bm25": 1.0},
             "candidates": 50, "rerank": True, "expand": {"synonyms": True, "spelling": False}},
        ),
    ],
    "graph": [
        ("Entities and their neighbours", {"query": "Which battery pack does the PPR-9087 use?", "top_k": 5}),
        ("Two hops, Chinese", {"query": "鱼香肉丝", "top_k": 5, "hops": 2}),
        ("Global: communities", {"query": "What are the main product safety issues?", "scope": "global", "top_k": 3}),
    ],
    None: [
        ("Keyword mode", {"query": "PPR-9087", "mode": "bm25", "top_k": 5}),
        ("Three-way hybrid",
         {"query": "Which restaurant serves 鱼香肉丝 in the partner program?", "mode": "hybrid", "graph": True}),
        ("Hybrid mode with KB scope", {"query": "refund within 30 days", "mode": "hybrid", "kb_ids": [1]}),
    ],
}  # fmt: skip
SUMMARIES = {
    "vector": "Dense (vector) search",
    "bm25": "Keyword (BM25) search; never embeds the query",
    "hybrid": "Hybrid search: BM25 and dense lists (with `graph`, the graph's too) fused into one "
    f"(`fusion`; default: the KB's, else {DEFAULT_FUSION})",
    "graph": "Graph search: passages mentioning the query's entities and their neighbours (never embeds); "
    "`scope: global`: communities ranked by their summaries (BM25 and cosine: that one embeds the query)",
    None: "Search in the mode the body names (vector, bm25, hybrid or graph; default hybrid)",
}
DESCRIPTION = (
    "Searches the knowledge bases of the API key's tenant (or `kb_ids`), pre-filtered by `filters`. "
    "A part that fails (an expander, one leg of a hybrid search, the reranker) is named in `degraded` "
    "and the others still answer; only a search that cannot answer at all is a 503."
)


class SearchViewSchema(OpenApiViewExtension):
    """Request body, responses and examples of every search endpoint (``SearchView`` and its subclasses)."""

    target_class = "retrieval.views.SearchView"
    match_subclasses = True

    def view_replacement(self) -> type[APIView]:
        view = self.target
        mode = view.mode
        examples = [OpenApiExample(name, value=value, request_only=True) for name, value in REQUEST_EXAMPLES[mode]]
        examples += [
            OpenApiExample(
                "Results",
                value=response_example(mode or "hybrid"),
                response_only=True,
                status_codes=["200"],
            ),
            OpenApiExample(
                "Degraded: keyword index down", value=DEGRADED_EXAMPLE, response_only=True, status_codes=["200"]
            ),
        ]
        if mode == "graph":
            examples.append(
                OpenApiExample("Global: communities", value=GLOBAL_EXAMPLE, response_only=True, status_codes=["200"])
            )

        class Documented(view):  # type: ignore[misc, valid-type]  # the extension's target view, known at run time
            @extend_schema(
                operation_id=f"retrieval_{mode or 'search'}",
                summary=SUMMARIES[mode],
                description=DESCRIPTION,
                tags=["retrieval"],
                request=view.input_serializer,
                parameters=SEARCH_HEADERS,
                responses={200: GRAPH_OUTPUT if mode == "graph" else SearchOutput, **error_responses(*SEARCH_ERRORS)},
                examples=examples,
            )
            def post(self, request: TenantRequest) -> HttpResponse:
                response: HttpResponse = super().post(request)
                return response

        return Documented


# --- Dify's External Knowledge API (retrieval.dify) -------------------------------------------------

DIFY_ERRORS = {
    400: ("A bad body or filter: `error_code` is the status.", 400, "retrieval_setting: This field is required."),
    403: (
        (
            "1001: a missing or malformed `Authorization` header; 1002: an unknown, expired or revoked key, or "
            "one without the `search` scope."
        ),
        1001,
        "Invalid Authorization header format. Expected 'Bearer <api-key>' format.",
    ),
    404: ("2001: `knowledge_id` is not one of the key's knowledge bases.", 2001, "The knowledge does not exist."),
    429: (
        (
            "Rate limited like `/api/v1/retrieval/hybrid` (with `Retry-After`, which Dify ignores). Dify's "
            "unchanged retries of a call (same key and body within 30 s, at most 3) are checked but not counted."
        ),
        429,
        "Rate limit exceeded.",
    ),
    503: ("No retriever can answer.", 503, "cannot embed the query: the embedding service did not answer"),
}
DIFY_REQUEST_EXAMPLE = {
    "knowledge_id": "1",
    "query": "How should I store the lithium battery pack?",
    "retrieval_setting": {"top_k": 3, "score_threshold": 0.2},
    "metadata_condition": {
        "logical_operator": "and",
        "conditions": [{"name": "category", "comparison_operator": "is", "value": "product"}],
    },
}
DIFY_RESPONSE_EXAMPLE = {
    "records": [
        {
            "content": HIT_EXAMPLE["content"],
            "score": HIT_EXAMPLE["relevance"],
            "title": HIT_EXAMPLE["title"],
            "metadata": {
                **HIT_EXAMPLE["metadata"],
                "path": HIT_EXAMPLE["source_uri"],
                "source": HIT_EXAMPLE["source_uri"],
                "doc_id": HIT_EXAMPLE["doc_id"],
                "chunk_id": HIT_EXAMPLE["chunk_id"],
                "kb_id": HIT_EXAMPLE["kb_id"],
                "doc_type": HIT_EXAMPLE["doc_type"],
                "document_id": str(HIT_EXAMPLE["doc_id"]),
                "document_name": HIT_EXAMPLE["title"],
            },
        }
    ]
}


class DifyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Dify sends ``Authorization: Bearer <key>`` only."""

    target_class = "retrieval.dify.DifyApiKeyAuthentication"
    name = "DifyBearerApiKey"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return BEARER_SCHEME


class DifyRetrievalViewSchema(OpenApiViewExtension):
    target_class = "retrieval.dify.DifyRetrievalView"

    def view_replacement(self) -> type[APIView]:
        from retrieval.dify import DifyErrorOutput, DifyRetrievalInput, DifyRetrievalOutput

        errors = {
            status: OpenApiResponse(
                response=DifyErrorOutput,
                description=description,
                examples=[
                    OpenApiExample(
                        f"{status} {code}",
                        value={"error_code": code, "error_msg": message},
                        response_only=True,
                        status_codes=[str(status)],
                    )
                ],
            )
            for status, (description, code, message) in DIFY_ERRORS.items()
        }

        view = self.target

        class Documented(view):  # type: ignore[misc, valid-type]  # the extension's target view, known at run time
            @extend_schema(
                operation_id="dify_retrieval",
                summary="Dify External Knowledge API: hybrid search of one knowledge base",
                description=(
                    "Register `http(s)://<host>/api/v1/dify` as the external knowledge API in Dify and the "
                    "knowledge base id as the external knowledge ID. Dify's registration probe (`knowledge_id` "
                    "and `query` both blank, or, from Dify before 1.x, no body at all: the body is optional for "
                    'that probe only) gets `{"records": []}` once the key is checked. '
                    "Errors use Dify's shape `{error_code, error_msg}`. `score` is the hit's `relevance` (0 to 1, "
                    "comparable across queries of the knowledge base; see the search endpoints), raised where "
                    "needed so that it never increases down the ranking (Dify sorts by score); "
                    "`score_threshold` drops hits whose relevance is below it. `metadata_condition` null, or "
                    "its `conditions` null or missing: no filter; a condition without a value is skipped and "
                    "named in `notes`. `metadata.document_id` is what Dify cites a record by."
                ),
                tags=["dify"],
                request=DifyRetrievalInput,
                parameters=SEARCH_HEADERS[1:],
                responses={200: DifyRetrievalOutput, **errors},
                examples=[
                    OpenApiExample("Dify request", value=DIFY_REQUEST_EXAMPLE, request_only=True),
                    OpenApiExample("Records", value=DIFY_RESPONSE_EXAMPLE, response_only=True, status_codes=["200"]),
                ],
            )
            def post(self, request: TenantRequest) -> Response:
                response: Response = super().post(request)
                return response

        return Documented


def dify_body_is_optional(result: dict[str, Any], generator: object, request: object, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: Dify's older registration probe POSTs no body at all, which the
    endpoint answers like the blank probe (``retrieval.dify.is_registration_probe``), so its body is optional."""
    for path, item in result.get("paths", {}).items():
        if path.startswith("/api/v1/dify") and "requestBody" in item.get("post", {}):
            item["post"]["requestBody"]["required"] = False
    return result
