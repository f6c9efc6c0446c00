"""Remote models a search may call: the chat model (query rewriting) and the reranker, and their deadline."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from retrieval_site.settings.base import HttpUrlOrUnset, Lowercase, Ranks, Section


class RemoteServices(Section):
    title = "Remote services: chat model and reranker"

    LLM_URL: Annotated[HttpUrlOrUnset, Ranks] = ""  # OpenAI-compatible chat endpoint for optional query rewriting
    LLM_MODEL: Annotated[str, Ranks] = ""
    LLM_API_KEY: str = ""
    LLM_TIMEOUT_S: PositiveFloat = 3.0
    LLM_WEIGHT: Annotated[NonNegativeFloat, Ranks] = 0.6
    RERANKER_URL: Annotated[HttpUrlOrUnset, Ranks] = ""  # remote /v1/rerank (llama.cpp, TEI, vLLM, Xinference)
    RERANKER_MODEL: Annotated[str, Ranks] = ""  # or a local CrossEncoder folder
    RERANKER_API_KEY: str = ""
    RERANKER_TIMEOUT_S: PositiveFloat = 2.0
    RERANKER_RETRIES: NonNegativeInt = 1
    RERANKER_MAX_TOKENS: Annotated[PositiveInt, Ranks] = 256
    RERANK_TOP_N: Annotated[PositiveInt, Ranks] = 30  # only the head of the fused list is reranked
    # A rerank that fails (or has no reranker): "fallback" answers unreranked, degraded; "error" is a 503.
    RERANK_ON_FAILURE: Annotated[Literal["fallback", "error"], Lowercase] = "fallback"
    # The fallback's order: "fused" (the search's own) or "dense" (by cosine; hits without one after, fused).
    RERANK_FALLBACK_ORDER: Annotated[Literal["fused", "dense"], Lowercase, Ranks] = "fused"
    # Total time each optional remote stage of a search may take (reranker, LLM expander, Elasticsearch):
    # connect, send, every read and every retry together. A stage that misses it is degraded ("deadline").
    SEARCH_DEADLINE_MS: PositiveInt = 2000
