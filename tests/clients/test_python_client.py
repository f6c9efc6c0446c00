"""The Python client (``clients/python``, import ``retrieval_client``) against the real service over real HTTP
(pytest-django's live server), and its retries against a fake peer that injects 429s, 503s and refusals."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import time
from dataclasses import fields
from pathlib import Path

import httpx
import pytest

from retrieval_client import (
    AsyncRetrievalClient,
    AuthenticationError,
    Contribution,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    RetrievalClient,
    SearchHit,
    SearchResult,
    ServerError,
    ServiceUnavailableError,
    TransportError,
)
from retrieval_client.langchain import (
    RetrievalServiceRetriever,
    count_tokens,
    format_context,
    search_knowledge_base_tool,
)
from tenants.services import create_api_key
from tests.factories import TenantFactory
from tests.peers import Peer, Reply
from tests.retrieval.api_corpus import MANUALS, build_corpus

INTEGRATIONS = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
KETTLE_QUERY = "How long does the kettle need to boil water?"
LOCK = "The PPR-9087 door lock is made by Skyline Home."  # names for the graph: a code and a maker
EMPTY_ANSWER = {"results": [], "mode": "hybrid", "total": 0}


@pytest.fixture
def service(live_server, tmp_path, embedder) -> tuple[str, str]:
    """(base URL, API key) of the live service with a tenant holding the "manuals" KB."""
    tenant = TenantFactory()
    build_corpus(tmp_path, tenant, {"manuals": {**MANUALS, "lock.txt": (LOCK, None)}})
    return live_server.url, create_api_key(tenant=tenant).raw_key


def source_names(result: SearchResult) -> list[str]:
    return [Path(hit.source_uri).name for hit in result.results]


def field_names(cls) -> set[str]:
    return {field.name for field in fields(cls)}


# --- against the live service ---------------------------------------------------------------------


@pytest.mark.slow
def test_every_mode_returns_typed_results_equal_to_the_json_answer(service):
    url, key = service
    with RetrievalClient(url, key) as client, httpx.Client(base_url=url) as http:
        for mode, call in [("hybrid", client.hybrid), ("bm25", client.bm25), ("vector", client.vector)]:
            result = call(KETTLE_QUERY, top_k=2, expand={"synonyms": False})
            assert isinstance(result, SearchResult) and result.mode == mode
            assert source_names(result)[0] == "kettle.txt"
            assert all(isinstance(hit, SearchHit) for hit in result.results)
            assert all(isinstance(part, Contribution) for hit in result.results for part in hit.retrievers.values())
            assert result.request_id and result.total == len(result.results) == 2
            raw = http.post(f"/api/v1/retrieval/{mode}", json={"query": KETTLE_QUERY, "top_k": 2},
                            headers={"Authorization": f"Bearer {key}"}).json()  # fmt: skip
            assert [hit.chunk_id for hit in result.results] == [hit["chunk_id"] for hit in raw["results"]]
            assert [hit.score for hit in result.results] == [hit["score"] for hit in raw["results"]]
            assert [hit.relevance for hit in result.results] == [hit["relevance"] for hit in raw["results"]]
            # every field the service answers has its attribute (the client ignores unknown ones)
            assert set(raw) <= field_names(SearchResult) and set(raw["results"][0]) <= field_names(SearchHit)
            assert [hit.section for hit in result.results] == [hit["section"] for hit in raw["results"]]
        searched = client.search(KETTLE_QUERY, mode="bm25", top_k=1, filters={"tags": "product"})
        assert searched.mode == "bm25" and source_names(searched) == ["kettle.txt"]
        grouped = client.hybrid(KETTLE_QUERY, top_k=2, aggregate="sum", group_by="document")
        raw = http.post("/api/v1/retrieval/hybrid", json={"query": KETTLE_QUERY, "top_k": 2, "aggregate": "sum",
                        "group_by": "document"}, headers={"Authorization": f"Bearer {key}"}).json()  # fmt: skip
        assert [(h.document_score, h.passages) for h in grouped.results] == [
            (h["document_score"], h["passages"]) for h in raw["results"]
        ]
        assert all(hit.document_score is not None and hit.passages is not None for hit in grouped.results)
        graph = client.graph("Who makes the PPR-9087?", hops=1)
        raw = http.post("/api/v1/retrieval/graph", json={"query": "Who makes the PPR-9087?", "hops": 1},
                        headers={"Authorization": f"Bearer {key}"}).json()  # fmt: skip
        assert graph.mode == "graph" and source_names(graph)[0] == "lock.txt"
        assert [hit.chunk_id for hit in graph.results] == [hit["chunk_id"] for hit in raw["results"]]
        explained = [hit.retrievers["graph"].explanation for hit in graph.results]
        assert explained[0]["entities"] and "hops" in explained[0]
        assert explained == [{k: v for k, v in h["retrievers"]["graph"].items() if k not in ("rank", "score", "query")}
                             for h in raw["results"]]  # fmt: skip


@pytest.mark.slow
def test_the_services_errors_are_typed_exceptions(service):
    url, key = service
    with RetrievalClient(url, "rk_not_a_real_key") as client, pytest.raises(AuthenticationError) as denied:
        client.hybrid("refunds")
    assert (denied.value.status, denied.value.code) == (403, "invalid_api_key") and denied.value.request_id
    with RetrievalClient(url, key) as client:
        with pytest.raises(NotFoundError) as missing:
            client.hybrid("refunds", kb_ids=[10**9])
        assert (missing.value.status, missing.value.code) == (404, "knowledge_base_not_found")
        with pytest.raises(InvalidRequestError) as invalid:
            client.vector("refunds", filters={"colour": "red"})
        assert (invalid.value.status, invalid.value.code) == (400, "invalid_filter")
        assert "colour" in invalid.value.message


@pytest.mark.slow
def test_the_async_client_answers_like_the_sync_one(service):
    url, key = service

    async def both_modes():
        async with AsyncRetrievalClient(url, key) as client:
            return await asyncio.gather(client.hybrid(KETTLE_QUERY, top_k=3), client.search(KETTLE_QUERY, mode="bm25"))

    hybrid, bm25 = asyncio.run(both_modes())
    with RetrievalClient(url, key) as client:
        again = client.hybrid(KETTLE_QUERY, top_k=3)
    assert [hit.chunk_id for hit in hybrid.results] == [hit.chunk_id for hit in again.results]
    assert bm25.mode == "bm25" and source_names(bm25)[0] == "kettle.txt"


@pytest.mark.slow
def test_the_langchain_retriever_returns_documents_with_scores_and_explanation(service):
    url, key = service
    with RetrievalClient(url, key) as client:
        retriever = RetrievalServiceRetriever(client=client, top_k=2, mode="hybrid")
        documents = retriever.invoke(KETTLE_QUERY)
        hits = client.hybrid(KETTLE_QUERY, top_k=2).results
    assert [doc.page_content for doc in documents] == [hit.content for hit in hits]
    first = documents[0].metadata
    assert Path(first["source"]).name == "kettle.txt" and first["title"] == "Kettle manual"
    assert first["score"] == hits[0].score and first["relevance"] == hits[0].relevance
    assert first["rank"] == 1 and documents[0].id == str(hits[0].chunk_id)
    assert set(first["explanation"]["retrievers"]) == set(hits[0].retrievers)
    assert first["explanation"]["matched_queries"] == hits[0].matched_queries
    assert first["region"] == "us"  # the document's own metadata


@pytest.mark.slow
def test_the_retriever_and_tool_work_async_and_scoped(service):
    url, key = service

    async def run():
        async with AsyncRetrievalClient(url, key) as async_client:
            with RetrievalClient(url, key) as client:
                retriever = RetrievalServiceRetriever(
                    client=client, async_client=async_client, top_k=3, mode="bm25", filters={"tags": "policy"}
                )
                documents = await retriever.ainvoke("refund items")
                tool = search_knowledge_base_tool(retriever, max_tokens=300)
                return documents, await tool.ainvoke({"query": "refund items"}), tool

    documents, context, tool = asyncio.run(run())
    assert [Path(doc.metadata["source"]).name for doc in documents] == ["returns.md"]
    assert tool.name == "search_knowledge_base" and "query" in tool.args
    assert context.startswith("[1] Return policy (") and "full refund" in context and "[2]" not in context


@pytest.mark.slow
def test_the_documented_langchain_example_runs(service):
    url, key = service
    code = re.search(r"## Python client and LangChain.*?```python\n(.*?)```", INTEGRATIONS.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 5
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(code.replace("http://127.0.0.1:8000", url), {"API_KEY": key})  # the documentation's own code
    assert output.getvalue().startswith("[1] ")


# --- format_context -------------------------------------------------------------------------------


def hit(number: int, content: str, title: str = "") -> SearchHit:
    return SearchHit(chunk_id=number, doc_id=number, kb_id=1, content=content, score=1.0, rank=number,
                     title=title, source_uri=f"docs/{number}.md")  # fmt: skip


def test_format_context_numbers_sources_and_keeps_within_the_budget():
    hits = [hit(1, "alpha " * 10, "First"), hit(2, "退货政策" * 5), hit(3, "gamma " * 50, "Third")]
    everything = format_context(hits, max_tokens=10_000)
    assert everything.split("\n\n")[0] == "[1] First (docs/1.md)\n" + ("alpha " * 10).strip()
    assert "[2] docs/2.md\n" + "退货政策" * 5 in everything and "[3] Third (docs/3.md)" in everything
    for budget in (5, 30, 60):
        context = format_context(hits, max_tokens=budget)
        assert count_tokens(context) <= budget + 1  # the cut passage ends with "…"
    cut = format_context(hits, max_tokens=60)
    assert cut.startswith("[1] First") and "[3] Third" in cut and cut.endswith("…")
    assert format_context([], max_tokens=100) == ""


# --- retries, against a fake peer ----------------------------------------------------------------


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    """The waits the client takes between attempts (recorded, not waited)."""
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    return waits


def scripted(*replies: Reply) -> Peer:
    queue = list(replies)
    return Peer(lambda request: queue.pop(0) if len(queue) > 1 else queue[0])


def test_429_and_503_are_retried_honouring_retry_after(slept):
    error = {"error": {"code": "embedder_unavailable", "message": "down", "request_id": "r1"}}
    with scripted(Reply(429, {"error": {"code": "rate_limited", "message": "slow down", "request_id": "r0"}},
                        {"Retry-After": "2"}),
                  Reply(503, error), Reply(200, EMPTY_ANSWER)) as peer:  # fmt: skip
        result = RetrievalClient(peer.url, "k", retries=2, backoff_s=0.25).hybrid("q", top_k=3)
    assert result.results == [] and len(peer.requests) == 3
    assert slept == [2.0, 0.5]  # Retry-After, then the backoff of the second retry
    assert peer.requests[0].path == "/api/v1/retrieval/hybrid"
    assert peer.requests[0].json() == {"query": "q", "top_k": 3}
    assert peer.requests[0].headers["authorization"] == "Bearer k"


def test_retries_stop_after_the_last_attempt_or_at_the_deadline(slept):
    error = {"error": {"code": "lexical_index_unavailable", "message": "down", "request_id": "r9"}}
    with scripted(Reply(503, error)) as peer, pytest.raises(ServiceUnavailableError) as unavailable:
        RetrievalClient(peer.url, "k", retries=2).bm25("q")
    assert len(peer.requests) == 3 and len(slept) == 2
    assert (unavailable.value.code, unavailable.value.request_id, unavailable.value.status) == (
        "lexical_index_unavailable", "r9", 503,
    )  # fmt: skip
    limited = {"error": {"code": "rate_limited", "message": "over", "request_id": "r2"}}
    with scripted(Reply(429, limited, {"Retry-After": "120"})) as peer, pytest.raises(RateLimitedError) as over:
        RetrievalClient(peer.url, "k", timeout=10, retries=3).hybrid("q")
    assert len(peer.requests) == 1 and over.value.retry_after == 120.0  # the wait would pass the deadline


def test_an_error_that_a_retry_cannot_fix_is_not_retried(slept):
    invalid = {"error": {"code": "invalid_request", "message": "top_k: too big", "request_id": "r3"}}
    with scripted(Reply(400, invalid)) as peer, pytest.raises(InvalidRequestError):
        RetrievalClient(peer.url, "k", retries=3).vector("q", top_k=1000)
    assert len(peer.requests) == 1 and slept == []
    with scripted(Reply(502, b"<html>bad gateway</html>")) as peer, pytest.raises(ServerError) as bad:
        RetrievalClient(peer.url, "k").hybrid("q")
    assert bad.value.code == "http_502" and "bad gateway" in bad.value.message


def test_a_refused_connection_is_a_transport_error_after_the_retries(slept):
    peer = Peer(lambda request: Reply(200, EMPTY_ANSWER))
    peer.close()
    with pytest.raises(TransportError) as refused:
        RetrievalClient(peer.url, "k", retries=1).hybrid("q")
    assert refused.value.status is None and len(slept) == 1


def test_the_async_client_retries_too(monkeypatch):
    waits: list[float] = []

    async def no_wait(seconds):
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_wait)

    async def call(url):
        async with AsyncRetrievalClient(url, "k", retries=1, backoff_s=0.1) as client:
            return await client.vector("q")

    with scripted(Reply(503, {"error": {"code": "x", "message": "y"}}), Reply(200, EMPTY_ANSWER)) as peer:
        result = asyncio.run(call(peer.url))
    assert result.results == [] and waits == [0.1] and len(peer.requests) == 2


@pytest.mark.slow
def test_a_parent_child_hit_carries_its_parent_and_matched_children(live_server, tmp_path, embedder):
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base
    from tests.retrieval.services.test_parents import PAIRING

    tenant = TenantFactory()
    kb = create_knowledge_base(
        tenant=tenant, name="pc", chunking="parent_child", chunk_size=24, chunk_overlap=0, parent_chunk_size=120
    )
    (tmp_path / "hub.txt").write_text(PAIRING)
    Ingester(kb).ingest(discover_files([tmp_path]))
    with RetrievalClient(live_server.url, create_api_key(tenant=tenant).raw_key) as client:
        hit = client.hybrid("Zigbee pairing button", top_k=1).results[0]
    assert hit.content == PAIRING and hit.parent_id is not None
    assert len(hit.children) >= 2 and {"chunk_id", "ordinal", "retrievers"} == set(hit.children[0])
