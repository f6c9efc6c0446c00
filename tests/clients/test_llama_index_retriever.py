"""The Python client's LlamaIndex retriever (extra ``llama-index``) with the real ``llama-index-core``, against
the live service over real HTTP, sync and async, as the LangChain retriever is tested."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from pathlib import Path

import pytest
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from retrieval_client import AsyncRetrievalClient, RetrievalClient
from retrieval_client.llama_index import RetrievalServiceRetriever
from tests.clients.test_python_client import INTEGRATIONS, KETTLE_QUERY, service  # noqa: F401  # the live service fixture


@pytest.mark.slow
def test_the_llama_index_retriever_returns_nodes_with_the_hits_metadata(service):  # noqa: F811
    url, key = service
    with RetrievalClient(url, key) as client:
        retriever = RetrievalServiceRetriever(client, top_k=2, mode="hybrid")
        assert isinstance(retriever, BaseRetriever)
        found = retriever.retrieve(KETTLE_QUERY)
        hits = client.hybrid(KETTLE_QUERY, top_k=2).results
    assert all(isinstance(item, NodeWithScore) and isinstance(item.node, TextNode) for item in found)
    assert [item.node.get_content() for item in found] == [hit.content for hit in hits]
    assert [item.node.node_id for item in found] == [str(hit.chunk_id) for hit in hits]
    assert [item.score for item in found] == [hit.relevance for hit in hits]
    first = found[0].node.metadata
    assert Path(first["source"]).name == "kettle.txt" and first["title"] == "Kettle manual"
    assert first["score"] == hits[0].score and first["rank"] == 1 and first["region"] == "us"
    assert set(first["explanation"]["retrievers"]) == set(hits[0].retrievers)
    shown = found[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "Kettle manual" in shown and "explanation" not in shown  # a model sees the source, not the scores


@pytest.mark.slow
def test_the_llama_index_retriever_works_async_and_scoped(service):  # noqa: F811
    url, key = service

    async def run():
        async with AsyncRetrievalClient(url, key) as async_client:
            with RetrievalClient(url, key) as client:
                scoped: dict = {"top_k": 3, "mode": "bm25", "filters": {"tags": "policy"}}
                with_async = RetrievalServiceRetriever(client, async_client=async_client, **scoped)
                in_a_thread = RetrievalServiceRetriever(client, **scoped)
                return await with_async.aretrieve("refund items"), await in_a_thread.aretrieve("refund items")

    for found in asyncio.run(run()):
        assert [Path(item.node.metadata["source"]).name for item in found] == ["returns.md"]


@pytest.mark.slow
def test_the_documented_llama_index_example_runs(service):  # noqa: F811
    url, key = service
    code = re.search(r"## LlamaIndex.*?```python\n(.*?)```", INTEGRATIONS.read_text(), re.S).group(1)
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(code.replace("http://127.0.0.1:8000", url), {"API_KEY": key})  # the documentation's own code
    lines = output.getvalue().splitlines()
    assert len(lines) == 4 and all(float(line.split()[0]) <= 1 for line in lines)
