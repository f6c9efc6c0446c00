"""The MCP server (official ``mcp`` SDK, v2's ``MCPServer``): streamable HTTP at ``/mcp`` in the served
ASGI app, and stdio (``manage.py mcp_stdio --key ...``) for desktop agents.

Over HTTP every request must carry ``Authorization: Bearer <key>`` (or ``X-API-Key``) of a usable key with
the ``search`` scope: :class:`AuthenticatedMCP` answers 401/403 with the service's JSON error before the SDK
reads the request, so no tool (nor ``initialize``) runs without a key. The server is stateless (each POST
stands alone, answered as JSON), so any worker of any machine answers any call and each call is checked
again. The tools themselves are in :mod:`retrieval.mcp_tools`; a failed call is an MCP tool error
(``isError``) whose text is the service's error document, ``{"error": {"code", "message", "request_id"}}``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError
from starlette.applications import Starlette

from core.asgi import Message, Receive, Scope, Send
from core.errors import DomainError, error_document
from core.request_id import REQUEST_ID_HEADER, accepted_request_id
from retrieval import mcp_tools
from retrieval.types import MODES

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
INSTRUCTIONS = (
    "Search this service's knowledge bases for passages that answer a question. Call list_knowledge_bases to "
    "see what can be searched, search to find passages (cite each by its `citation` or `source_uri`), then "
    "get_passage for a hit's surrounding text or get_document for its whole document."
)


class RetrievalMCPServer(MCPServer):
    """``MCPServer`` whose argument errors carry the service's ``invalid_request`` code, like its other
    errors; ``stdio_key`` is the key of a stdio process (over HTTP, each request's header)."""

    stdio_key: str | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ServiceError):  # the SDK prefixes its text: the document alone
                raise exc.__cause__ from exc.__cause__.__cause__
            if isinstance(exc.__cause__, ValidationError):
                raise tool_error("invalid_request", f"Invalid arguments for {name}: {exc.__cause__}") from exc
            if self._tool_manager.get_tool(name) is None:
                raise tool_error("unknown_tool", f"Unknown tool: {name}") from exc
            raise


class ServiceError(ToolError):
    """A tool error whose text is the service's error document."""


def tool_error(code: str, message: str, details: Any = None, request_id: str | None = None) -> ServiceError:
    return ServiceError(json.dumps(error_document(code, message, request_id or uuid.uuid4().hex, details)))


def raw_key_of(context: Context | None, server: RetrievalMCPServer) -> str | None:
    """The key of this call: the HTTP request's header, else the stdio process's ``--key``."""
    request = None
    try:
        request = context.request_context.request if context is not None else None
    except ValueError:  # no request context: a call made in-process
        request = None
    headers = getattr(request, "headers", None)
    if headers is None:
        return server.stdio_key
    return key_from_headers(headers.get("authorization", ""), headers.get("x-api-key", ""))


def key_from_headers(authorization: str, x_api_key: str) -> str | None:
    """As the REST API reads it: ``Bearer <key>``, else ``X-API-Key``; a malformed header is no key."""
    if authorization:
        scheme, _, value = authorization.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None
    return x_api_key.strip() or None


async def run_tool(context: Context | None, work: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``work(api_key, *args)`` on a worker thread (Django's database calls are synchronous), after the key's
    check; a :class:`DomainError` becomes the tool error carrying its code. Each call is logged as the access
    log logs a request (tool, code, latency, tenant, request id)."""
    raw_key = raw_key_of(context, server)
    request_id = uuid.uuid4().hex
    started = time.perf_counter()
    caller: dict[str, Any] = {}

    def call() -> dict[str, Any]:
        close_old_connections()
        try:
            api_key = mcp_tools.authenticated(raw_key)
            caller.update(tenant=api_key.tenant.name, tenant_id=api_key.tenant_id)
            return work(api_key, *args)
        finally:
            close_old_connections()

    code = "ok"
    try:
        return await anyio.to_thread.run_sync(call)
    except DomainError as exc:
        code = exc.code
        raise tool_error(exc.code, exc.message, exc.details, request_id) from exc
    finally:
        latency_ms = round((time.perf_counter() - started) * 1000, 2)
        tool = getattr(work, "__name__", "tool")
        logger.info("mcp %s %s %.1f ms", tool, code, latency_ms, extra={
            "route": f"mcp-{tool}", "code": code, "latency_ms": latency_ms, "request_id": request_id, **caller})  # fmt: skip


server = RetrievalMCPServer(
    name="retrieval-service",
    title="Retrieval service",
    instructions=INSTRUCTIONS,
    version="1",
    warn_on_duplicate_tools=False,
)

ModeName = Literal["hybrid", "vector", "bm25", "graph"]
assert set(ModeName.__args__) == set(MODES)  # type: ignore[attr-defined]


@server.tool(
    title="Search the knowledge bases",
    description=(
        "Find the passages that best answer `query` in the caller's knowledge bases (all of them, or `kb_ids`). "
        "Each result has the passage text (`content`), its document's `title` and `source_uri`, its `section` "
        "and `page` where known, a `citation` string, the fused `score` and `relevance` (0-1, comparable from "
        "query to query of a knowledge base; higher is better). `filters` uses the service's filter language, e.g. "
        '{"tags": "policy"} or {"metadata.region": {"in": ["eu", "us"]}}.'
    ),
    annotations=READ_ONLY,
)
async def search(
    query: Annotated[str, Field(description="the question or keywords, in natural language", min_length=1)],
    ctx: Context,
    kb_ids: Annotated[list[int] | None, Field(description="knowledge base ids to search; omit for all")] = None,
    mode: Annotated[ModeName, Field(description="hybrid (default), vector, bm25 (keywords only) or graph")] = "hybrid",
    top_k: Annotated[int, Field(description="how many passages to return", ge=1, le=100)] = 5,
    filters: Annotated[dict[str, Any] | None, Field(description="metadata filter (service filter language)")] = None,
) -> dict[str, Any]:
    arguments = {"query": query, "kb_ids": kb_ids, "mode": mode, "top_k": top_k, "filters": filters}
    return await run_tool(ctx, mcp_tools.search, arguments)


@server.tool(
    title="List the knowledge bases",
    description="The knowledge bases this key can search: id, name, description, languages and document count.",
    annotations=READ_ONLY,
)
async def list_knowledge_bases(ctx: Context) -> dict[str, Any]:
    return await run_tool(ctx, mcp_tools.list_knowledge_bases)


@server.tool(
    title="Read a passage in context",
    description=(
        "One passage (a search result's `chunk_id`) with its document, its parent passage where the knowledge "
        "base has parent-child chunks, and the passages just before (`previous`) and after (`next`) it."
    ),
    annotations=READ_ONLY,
)
async def get_passage(
    chunk_id: Annotated[int, Field(description="a search result's chunk_id", ge=1)], ctx: Context
) -> dict[str, Any]:
    return await run_tool(ctx, mcp_tools.get_passage, chunk_id)


@server.tool(
    title="Read a document",
    description=(
        "A document (a search result's `kb_id` and `doc_id`): its title, source, tags and metadata, and its "
        "passages in order (the first `max_passages`; `more_passages` says whether there are more)."
    ),
    annotations=READ_ONLY,
)
async def get_document(
    kb_id: Annotated[int, Field(description="the knowledge base id", ge=1)],
    document_id: Annotated[int, Field(description="the document id (a search result's doc_id)", ge=1)],
    ctx: Context,
    max_passages: Annotated[int, Field(description="passages to include", ge=0, le=100)] = 20,
) -> dict[str, Any]:
    return await run_tool(ctx, mcp_tools.get_document, kb_id, document_id, max_passages)


def streamable_http_app() -> Starlette:
    """The SDK's Starlette app serving ``/mcp``: stateless, JSON answers. Its DNS-rebinding guard is off:
    it protects servers trusting whoever reaches them, and every request here must carry an API key,
    which a page in a browser does not have."""
    return server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )


class AuthenticatedMCP:
    """ASGI: ``/mcp`` requests without a usable ``search`` key get the service's 401/403 JSON error (counted,
    as on the REST API, against the caller's address: ``RATE_LIMIT_ANONYMOUS``, then 429); the rest, and the
    lifespan that runs the SDK's session manager, go to the SDK's app. Every answer carries ``X-Request-ID``."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
        raw_key = key_from_headers(headers.get(b"authorization", ""), headers.get(b"x-api-key", ""))
        request_id = accepted_request_id(headers.get(REQUEST_ID_HEADER.lower().encode(), ""))
        address = (scope.get("client") or ("",))[0]

        def check() -> None:
            close_old_connections()
            try:
                mcp_tools.authenticated(raw_key)
            except DomainError:
                mcp_tools.count_anonymous(address)  # a 429 once the address is over its limit
                raise
            finally:
                close_old_connections()

        try:
            await anyio.to_thread.run_sync(check)
        except DomainError as exc:
            await refuse(send, exc, request_id)
            return

        async def send_with_request_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", request_id.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_request_id)


async def refuse(send: Send, exc: DomainError, request_id: str) -> None:
    body = json.dumps(error_document(exc.code, exc.message, request_id, exc.details)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()),
    ]
    if exc.status_code == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if exc.retry_after_s is not None:
        headers.append((b"retry-after", str(exc.retry_after_s).encode()))
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def mcp_asgi_app() -> AuthenticatedMCP:
    return AuthenticatedMCP(streamable_http_app())
