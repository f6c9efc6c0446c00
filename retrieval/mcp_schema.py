"""``/mcp`` in the OpenAPI document (a drf-spectacular postprocessing hook): the MCP server is served by the
ASGI app, not by a Django view, but it is HTTP and JSON (JSON-RPC 2.0, answered as JSON), so clients find
it, its auth and its errors there too."""

from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/ErrorOutput"}
JSON_RPC = {
    "type": "object",
    "required": ["jsonrpc", "method"],
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "method": {"type": "string", "description": "initialize, tools/list, tools/call, ..."},
        "params": {"type": "object", "additionalProperties": True},
    },
}
DESCRIPTION = (
    "The MCP server (Model Context Protocol, streamable HTTP, stateless, answered as JSON): JSON-RPC 2.0 "
    "messages. Tools (all read-only): `search`, `list_knowledge_bases`, `get_passage`, `get_document`; list "
    "them with `tools/list`. Needs a key with the `search` scope: without one the answer is 401/403 before "
    "any message is read. A failed tool call is a result with `isError: true` whose text is this API's error "
    'document (`{"error": {"code", "message", "request_id"}}`). See docs/integrations.md.'
)


def add_mcp_path(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    result.setdefault("paths", {})["/mcp"] = {
        "post": {
            "operationId": "mcp",
            "summary": "MCP server (streamable HTTP)",
            "description": DESCRIPTION,
            "tags": ["mcp"],
            "security": [{"BearerApiKey": []}, {"ApiKeyHeader": []}],
            "parameters": [
                {
                    "name": "Accept",
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string", "example": "application/json, text/event-stream"},
                }
            ],  # fmt: skip
            "requestBody": {"required": True, "content": {"application/json": {"schema": JSON_RPC}}},
            "responses": {
                "200": {"description": "The JSON-RPC answer", "content": {"application/json": {"schema": JSON_RPC}}},
                "202": {"description": "A notification was accepted"},
                "401": {
                    "description": "No API key (`missing_api_key`)",
                    "content": {"application/json": {"schema": ERROR}},
                },
                "403": {
                    "description": "An invalid key (`invalid_api_key`) or one without `search` (`insufficient_scope`)",
                    "content": {"application/json": {"schema": ERROR}},
                },
            },
        }
    }
    return result
