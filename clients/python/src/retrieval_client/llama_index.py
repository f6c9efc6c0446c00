"""LlamaIndex integration (extra ``llama-index``): a retriever returning ``NodeWithScore``s, for query engines
and agents built on ``llama-index-core``."""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from retrieval_client.client import AsyncRetrievalClient, RetrievalClient
from retrieval_client.models import SearchHit, SearchResult

# What a node shows an LLM or an embedder of its metadata: where it is from, not the scores and ids.
_HIDDEN_FROM_MODELS = [
    "chunk_id", "doc_id", "kb_id", "doc_type", "rank", "score", "relevance", "fused_score", "rerank_score",
    "explanation",
]  # fmt: skip


class RetrievalServiceRetriever(BaseRetriever):
    """Nodes from the retrieval service: each ``NodeWithScore`` holds a ``TextNode`` (id: the chunk id, text: the
    passage, metadata: the hit's own metadata with its ids, title, source, section, scores and ``explanation``)
    and the hit's ``relevance`` (in [0, 1]) as its score. ``aretrieve`` uses ``async_client`` when given, else
    runs the sync client in a thread."""

    def __init__(
        self,
        client: RetrievalClient,
        *,
        async_client: AsyncRetrievalClient | None = None,
        top_k: int = 4,
        mode: Literal["hybrid", "bm25", "vector"] = "hybrid",
        kb_ids: list[int] | None = None,
        filters: dict[str, Any] | None = None,
        principals: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client, self.async_client = client, async_client
        self.top_k, self.mode, self.kb_ids, self.filters = top_k, mode, kb_ids, filters
        self.principals = principals  # the end user's, for a key with the act_as scope (docs/permissions.md)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return nodes(self.client.search(query_bundle.query_str, **self._options()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_client is None:
            import asyncio

            return await asyncio.to_thread(self._retrieve, query_bundle)
        return nodes(await self.async_client.search(query_bundle.query_str, **self._options()))

    def _options(self) -> dict[str, Any]:
        options = {"mode": self.mode, "top_k": self.top_k, "kb_ids": self.kb_ids, "filters": self.filters}
        return options if self.principals is None else {**options, "principals": self.principals}


def nodes(result: SearchResult) -> list[NodeWithScore]:
    return [node(hit) for hit in result.results]


def node(hit: SearchHit) -> NodeWithScore:
    text_node = TextNode(
        id_=str(hit.chunk_id),
        text=hit.content,
        metadata=hit.citation_metadata(),
        excluded_llm_metadata_keys=list(_HIDDEN_FROM_MODELS),
        excluded_embed_metadata_keys=list(_HIDDEN_FROM_MODELS),
    )
    return NodeWithScore(node=text_node, score=hit.relevance)
