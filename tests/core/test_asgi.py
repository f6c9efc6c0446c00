"""The served ASGI layer's hand-over: Django runs on a request thread, the event loop sends its answer."""

import asyncio
import threading

import pytest

from core.asgi import PathMount, WSGIOnThreads

SCOPE = {"type": "http", "method": "GET", "path": "/x", "raw_path": b"/x", "query_string": b"", "root_path": "",
         "headers": [], "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "scheme": "http",
         "http_version": "1.1"}  # fmt: skip


class Response(list):
    """A WSGI response whose close() (where Django ends its request) runs ``on_close``."""

    def __init__(self, on_close):
        super().__init__([b"hello"])
        self.on_close = on_close

    def close(self):
        self.on_close()


def serve(on_close) -> tuple[list[dict], WSGIOnThreads]:
    """One GET through WSGIOnThreads; the messages sent, and the server (to wait for its threads)."""

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Response(on_close)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    messages = []

    async def send(message):
        messages.append(message)
        if message["type"] == "http.response.body":
            body_sent.set()

    body_sent = threading.Event()
    server = WSGIOnThreads(app, threads=1)
    serve.body_sent = body_sent
    asyncio.run(server(dict(SCOPE), receive, send))
    return messages, server


def test_the_answer_is_sent_before_the_response_is_closed():
    """Work a response defers to its close (the dashboard counters) follows the answer out."""
    seen = []
    messages, server = serve(lambda: seen.append(serve.body_sent.wait(timeout=10)))
    server.executor.shutdown(wait=True)
    assert [m["type"] for m in messages] == ["http.response.start", "http.response.body"]
    assert messages[1]["body"] == b"hello" and seen == [True]


def test_a_close_that_fails_after_the_answer_is_logged(caplog):
    def fail():
        raise RuntimeError("counters down")

    messages, server = serve(fail)
    server.executor.shutdown(wait=True)
    assert messages[0]["status"] == 200
    assert [r.getMessage() for r in caplog.records if r.name == "core.asgi"] == ["closing a response failed"]


def test_a_request_failing_before_its_answer_raises_as_before():
    def app(environ, start_response):
        raise RuntimeError("view crashed")

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        raise AssertionError("nothing may be sent")

    with pytest.raises(RuntimeError, match="view crashed"):
        asyncio.run(WSGIOnThreads(app, threads=1)(dict(SCOPE), receive, send))


def test_a_request_thread_keeps_djangos_per_thread_state_between_requests():
    """The cache's client (an asgiref Local) is built once per thread, not once per request: rebuilding it
    opened a Redis connection and sent a PING on every request."""
    from django.core.cache import caches

    seen = []

    def app(environ, start_response):
        seen.append(caches["default"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    async def two_requests(server):
        for _ in range(2):
            await server(dict(SCOPE), receive, send)

    server = WSGIOnThreads(app, threads=1)
    asyncio.run(two_requests(server))
    server.executor.shutdown(wait=True)
    assert len(seen) == 2 and seen[0] is seen[1]


def test_a_path_mount_routes_its_prefix_and_the_lifespan_to_the_mounted_app():
    calls: list[tuple[str, str]] = []

    def app_named(name: str):
        async def app(scope, receive, send):
            calls.append((name, scope.get("path", scope["type"])))

        return app

    mount = PathMount(app_named("django"), "/mcp", app_named("mcp"))
    for scope in ({"type": "http", "path": "/mcp"}, {"type": "http", "path": "/mcp/x"},
                  {"type": "http", "path": "/mcpx"}, {"type": "http", "path": "/api/v1/stats"},
                  {"type": "lifespan"}):  # fmt: skip
        asyncio.run(mount(scope, None, None))
    assert calls == [("mcp", "/mcp"), ("mcp", "/mcp/x"), ("django", "/mcpx"), ("django", "/api/v1/stats"),
                     ("mcp", "lifespan")]  # fmt: skip
