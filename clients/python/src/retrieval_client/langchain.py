"""LangChain integration (extra ``langchain``): a retriever, the ``search_knowledge_base`` tool, and
``format_context`` that numbers sources so an answer can cite them as [1], [2], ..."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ConfigDict

from retrieval_client.client import AsyncRetrievalClient, RetrievalClient
from retrieval_client.models import SearchHit, SearchResult

# Without the model's tokenizer: a CJK character or a word (or punctuation run) counts as one token.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
TOOL_DESCRIPTION = (
    "Search the knowledge base for passages relevant to a question. Returns numbered sources; "
    "cite them as [1], [2] in the answer."
)


class RetrievalServiceRetriever(BaseRetriever):
    """``Document``s from the retrieval service: content, and metadata with the hit's own metadata, ids,
    title, source, scores and ``explanation`` (each retriever's rank and score, the query variants matched).

    ``ainvoke`` uses ``async_client`` when given, else runs the sync client in a thread."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: RetrievalClient
    async_client: AsyncRetrievalClient | None = None
    top_k: int = 4
    mode: Literal["hybrid", "bm25", "vector"] = "hybrid"
    kb_ids: list[int] | None = None
    filters: dict[str, Any] | None = None
    # The end user the search runs for ("user:<id>", "group:<id>"): needs a key with the act_as scope.
    principals: list[str] | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return documents(self.client.search(query, **self._options()))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        return documents(await self.async_client.search(query, **self._options()))

    def _options(self) -> dict[str, Any]:
        options = {"mode": self.mode, "top_k": self.top_k, "kb_ids": self.kb_ids, "filters": self.filters}
        return options if self.principals is None else {**options, "principals": self.principals}


def documents(result: SearchResult) -> list[Document]:
    return [document(hit) for hit in result.results]


def document(hit: SearchHit) -> Document:
    return Document(page_content=hit.content, metadata=hit.citation_metadata(), id=str(hit.chunk_id))


def format_context(hits: Sequence[SearchHit | Document], max_tokens: int = 2000) -> str:
    """Passages as numbered sources (``[1] title (source)`` then the text), in order, within about
    ``max_tokens`` (estimated, no tokenizer); the last passage that does not fit is cut at a word."""
    blocks, budget = [], max_tokens
    for number, hit in enumerate(hits, start=1):
        content, title, source = _parts(hit)
        content = content.strip()
        header = f"[{number}] {title}" + (f" ({source})" if source and source != title else "")
        budget -= count_tokens(header)
        if budget <= 0:
            break
        text = _truncate(content, budget)
        budget -= count_tokens(text)
        blocks.append(f"{header}\n{text}")
        if len(text) < len(content):
            break
    return "\n\n".join(blocks)


def count_tokens(text: str) -> int:
    return sum(1 for _ in _TOKEN.finditer(text))


def search_knowledge_base_tool(retriever: RetrievalServiceRetriever, max_tokens: int = 2000) -> BaseTool:
    """The ``search_knowledge_base`` tool for agents: the retriever's passages through ``format_context``."""

    def search_knowledge_base(query: str) -> str:
        return format_context(retriever.invoke(query), max_tokens)

    async def asearch_knowledge_base(query: str) -> str:
        return format_context(await retriever.ainvoke(query), max_tokens)

    return StructuredTool.from_function(
        func=search_knowledge_base,
        coroutine=asearch_knowledge_base,
        name="search_knowledge_base",
        description=TOOL_DESCRIPTION,
    )


def _parts(hit: SearchHit | Document) -> tuple[str, str, str]:
    if isinstance(hit, Document):
        source = str(hit.metadata.get("source", ""))
        return hit.page_content, str(hit.metadata.get("title") or source), source
    return hit.content, hit.title or hit.source_uri, hit.source_uri


def _truncate(text: str, max_tokens: int) -> str:
    end = 0
    for count, token in enumerate(_TOKEN.finditer(text), start=1):
        if count > max_tokens:
            return text[:end].rstrip() + " …"
        end = token.end()
    return text
