"""The MCP server driven by the official ``mcp`` SDK's own client over both transports: streamable HTTP at
``/mcp`` of the served app (gunicorn, as ``./run serve`` starts it) and stdio (``manage.py mcp_stdio``)."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import httpx
import httpx2
import pytest
from django.conf import settings
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tenants.models import RateTier, Scope
from tenants.selectors import forget_api_keys
from tenants.services import create_api_key
from tests.conftest import database_url_of_this_run
from tests.factories import TenantFactory
from tests.retrieval.api_corpus import MANUALS, build_corpus
from tests.retrieval_site.test_asgi import served

QUERY = "How should I return an unopened item for a refund?"
TOOLS = {"search", "list_knowledge_bases", "get_passage", "get_document"}


@pytest.fixture(scope="module")
def mcp_url(django_db_setup, tmp_path_factory):
    with served(tmp_path_factory.mktemp("gunicorn")) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture
def corpus(transactional_db, tmp_path, embedder):
    """Committed (the served process reads it): the "manuals" KB of one tenant, and another tenant's KB."""
    corpus = build_corpus(tmp_path, TenantFactory(), {"manuals": MANUALS})
    other = build_corpus(tmp_path, TenantFactory(), {"private": {"vault.txt": ("The vault code is 4711.", None)}})
    yield corpus, other
    forget_api_keys()


def http_client(url: str, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=120)))


def stdio_environment() -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "DATABASE_URL": database_url_of_this_run(),
        "REDIS_URL": settings.REDIS_URL,
        "VAR_DIR": str(settings.VAR_DIR),
        "LOG_LEVEL": "WARNING",
    }


def stdio_client(key: str) -> Client:
    command = [str(settings.BASE_DIR / "manage.py"), "mcp_stdio", "--key", key]
    parameters = StdioServerParameters(command=sys.executable, args=command, env=stdio_environment(),
                                       cwd=str(settings.BASE_DIR))  # fmt: skip
    return Client(parameters)


def other_chunk_of(other) -> int:
    return other.docs["vault.txt"].chunks.first().pk


def answer(result) -> dict:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def error_of(result) -> dict:
    assert result.is_error, result.content
    text = result.content[0].text
    assert text.startswith("{"), text
    return json.loads(text)["error"]


async def exercise(client: Client, corpus, other, other_chunk: int) -> list[int]:
    """Every tool, and the errors a caller can make (``other_chunk``: another tenant's); returns the search's
    chunk ids."""
    async with client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.annotations.read_only_hint is True and tool.description
        assert tools["search"].input_schema["required"] == ["query"]

        kbs = answer(await client.call_tool("list_knowledge_bases", {}))["knowledge_bases"]
        assert [kb["name"] for kb in kbs] == ["manuals"]  # not the other tenant's

        kb = corpus.kbs["manuals"]
        found = answer(await client.call_tool("search", {"query": QUERY, "top_k": 5, "kb_ids": [kb.pk]}))
        hits = found["results"]
        assert hits[0]["source_uri"].endswith("returns.md") and hits[0]["title"] == "Return policy"
        assert all(0 <= hit["relevance"] <= 1 and hit["citation"] and hit["content"] for hit in hits)
        assert {"score", "section", "page", "chunk_id", "doc_id"} <= set(hits[0])

        passage = answer(await client.call_tool("get_passage", {"chunk_id": hits[0]["chunk_id"]}))
        assert passage["content"] == hits[0]["content"] and "previous" in passage and "next" in passage
        document = answer(await client.call_tool("get_document", {"kb_id": kb.pk, "document_id": hits[0]["doc_id"]}))
        assert document["title"] == "Return policy" and document["passages"][0]["content"]

        # errors are tool errors carrying the service's codes
        assert error_of(await client.call_tool("search", {"query": QUERY, "top_k": 0}))["code"] == "invalid_request"
        assert error_of(await client.call_tool("search", {"query": QUERY, "filters": {"colour": "red"}}))["code"] == (
            "invalid_filter"
        )
        unknown = error_of(await client.call_tool("search", {"query": QUERY, "kb_ids": [other.kbs["private"].pk]}))
        assert unknown["code"] == "knowledge_base_not_found" and unknown["request_id"]
        for kb_id in (10**9, other.kbs["private"].pk):  # another tenant's answers like a missing one
            arguments = {"kb_id": kb_id, "document_id": hits[0]["doc_id"]}
            assert error_of(await client.call_tool("get_document", arguments))["code"] == "knowledge_base_not_found"
        assert error_of(await client.call_tool("get_passage", {"chunk_id": other_chunk}))["code"] == "passage_not_found"
        return [hit["chunk_id"] for hit in hits]


@pytest.mark.slow
def test_every_tool_over_streamable_http_answers_like_the_rest_api(mcp_url, corpus):
    corpus, other = corpus
    key = create_api_key(tenant=corpus.tenant).raw_key
    chunk_ids = anyio.run(exercise, http_client(mcp_url, key), corpus, other, other_chunk_of(other))
    body = {"query": QUERY, "top_k": 5, "kb_ids": [corpus.kbs["manuals"].pk]}
    rest = httpx.post(f"{mcp_url}/api/v1/retrieval/hybrid", json=body, headers={"Authorization": f"Bearer {key}"})
    assert chunk_ids == [hit["chunk_id"] for hit in rest.json()["results"]]


@pytest.mark.slow
def test_every_tool_over_stdio(corpus):
    corpus, other = corpus
    key = create_api_key(tenant=corpus.tenant).raw_key
    anyio.run(exercise, stdio_client(key), corpus, other, other_chunk_of(other))


@pytest.mark.slow
def test_no_request_reaches_the_tools_without_a_usable_search_key(mcp_url, transactional_db):
    tenant = TenantFactory()
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream"}
    missing = httpx.post(f"{mcp_url}/mcp", json=initialize, headers=accept)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    bad = httpx.post(f"{mcp_url}/mcp", json=initialize, headers={**accept, "Authorization": "Bearer rk_not_a_key"})
    assert bad.status_code == 403 and bad.json()["error"]["code"] == "invalid_api_key"
    ingest_only = create_api_key(tenant=tenant, scopes=[Scope.INGEST]).raw_key
    scoped = httpx.post(f"{mcp_url}/mcp", json=initialize, headers={**accept, "Authorization": f"Bearer {ingest_only}"})
    assert scoped.status_code == 403 and scoped.json()["error"]["code"] == "insufficient_scope"
    good = create_api_key(tenant=tenant).raw_key
    ok = httpx.post(f"{mcp_url}/mcp", json=initialize, headers={**accept, "Authorization": f"Bearer {good}"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["result"]["serverInfo"]["name"] == "retrieval-service" and ok.headers["X-Request-ID"]

    async def refused() -> None:
        with pytest.raises(Exception):  # noqa: B017,PT011  # the SDK's own error for a refused connection
            async with http_client(mcp_url, "rk_not_a_key") as client:
                await client.list_tools()

    anyio.run(refused)


@pytest.mark.slow
def test_tool_calls_count_against_the_keys_rate_tier(mcp_url, transactional_db):
    tenant = TenantFactory()
    tenant.rate_tier = RateTier.objects.create(name=f"tight-{tenant.pk}", requests_per_window=1000,
                                               endpoint_limits={"hybrid": 2})  # fmt: skip
    tenant.save()
    key = create_api_key(tenant=tenant).raw_key

    async def calls() -> list:
        async with http_client(mcp_url, key) as client:
            return [await client.call_tool("search", {"query": f"refunds {n}"}) for n in range(3)]

    first, second, third = anyio.run(calls)
    assert not first.is_error and not second.is_error
    limited = error_of(third)
    assert limited["code"] == "rate_limited" and limited["details"]["retry_after_s"] >= 1


@pytest.mark.slow
def test_mcp_openai_and_llama_index_agree_on_the_top_5(mcp_url, corpus):
    from openai import OpenAI

    from retrieval_client import RetrievalClient
    from retrieval_client.llama_index import RetrievalServiceRetriever

    corpus, _ = corpus
    kb_id = corpus.kbs["manuals"].pk
    key = create_api_key(tenant=corpus.tenant).raw_key

    async def over_mcp() -> list[int]:
        async with http_client(mcp_url, key) as client:
            found = answer(await client.call_tool("search", {"query": QUERY, "top_k": 5, "kb_ids": [kb_id]}))
            return [hit["chunk_id"] for hit in found["results"]]

    mcp_ids = anyio.run(over_mcp)
    page = OpenAI(base_url=f"{mcp_url}/v1", api_key=key, max_retries=0).vector_stores.search(
        str(kb_id), query=QUERY, max_num_results=5
    )
    with RetrievalClient(mcp_url, key) as client:
        nodes = RetrievalServiceRetriever(client, top_k=5, kb_ids=[kb_id]).retrieve(QUERY)
    assert len(mcp_ids) == 3  # every passage of the KB, in one order
    assert [int(result.attributes["chunk_id"]) for result in page.data] == mcp_ids
    assert [int(item.node.node_id) for item in nodes] == mcp_ids


@pytest.mark.slow
def test_calls_without_a_usable_key_count_against_the_address(mcp_url, transactional_db):
    """As on the REST API: past RATE_LIMIT_ANONYMOUS calls a window, a caller without a key gets 429s."""
    with httpx.Client(base_url=mcp_url) as http:
        statuses = [http.post("/mcp", json={}).status_code for _ in range(settings.RATE_LIMIT_ANONYMOUS + 1)]
        limited = http.post("/mcp", json={}, headers={"Authorization": "Bearer rk_not_a_key"})
    assert set(statuses) <= {401, 429} and statuses[0] in (401, 429)
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
    assert int(limited.headers["Retry-After"]) >= 1


@pytest.mark.slow
def test_the_stdio_server_refuses_to_start_without_a_usable_search_key(transactional_db):
    tenant = TenantFactory()
    ingest_only = create_api_key(tenant=tenant, scopes=[Scope.INGEST]).raw_key
    for key, code in (
        ("rk_not_a_key", "invalid_api_key"),
        (ingest_only, "insufficient_scope"),
        ("", "missing_api_key"),
    ):
        started = subprocess.run(
            [sys.executable, "manage.py", "mcp_stdio", "--key", key], cwd=settings.BASE_DIR, env=stdio_environment(),
            input=b"", capture_output=True, timeout=120,
        )  # fmt: skip
        assert started.returncode == 2 and code in started.stderr.decode(), started.stderr
        assert started.stdout == b""  # nothing on the protocol's stream
