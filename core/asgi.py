"""The served application's ASGI layer: Django's WSGI handler behind a server that reads requests on
an event loop (gunicorn's asyncio worker, ``core.gunicorn_worker``).

:class:`WSGIOnThreads` hands a request to Django on one of a fixed pool of threads only once its body
has arrived whole, so a slow client costs a coroutine, not a thread; the threads live as long as the
worker, so each keeps its database connection (``DB_CONN_MAX_AGE``). Django's own ASGI handler was
slower here (docs/BENCHMARKS.md, "Slow clients").

:class:`BoundedRequest`, in front of it, bounds what a slow client can cost:

* the whole body must arrive within ``REQUEST_BODY_TIMEOUT_S`` of the first read (a client dripping a
  byte a second gets a 408, however often it sends);
* a body over ``UPLOAD_MAX_REQUEST_BYTES`` (the largest any endpoint takes) is a 413 as soon as it is
  announced or read, before it is buffered;
* a ``Transfer-Encoding: chunked`` body has no ``Content-Length``, and Django checks
  ``MAX_REQUEST_BYTES`` against that header: such a body is read here (at most one byte past the limit,
  so a larger one still gets Django's 413) and handed on with its length.

These answers are the service's JSON errors with a request id.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile
from typing import IO, Any
from wsgiref.types import WSGIApplication

from asgiref.wsgi import WsgiToAsgiInstance
from django.conf import settings

from core.errors import error_document
from core.request_id import REQUEST_ID_HEADER, accepted_request_id

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApplication = Callable[[Scope, Receive, Send], Awaitable[None]]
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body

DISCONNECT = {"type": "http.disconnect"}
BODY_IN_MEMORY_BYTES = 1024 * 1024  # a larger body (an upload) waits for its thread in a temporary file


class WSGIOnThreads:
    """An ASGI application running a WSGI one on ``threads`` threads, each request once its body is read.

    One hand-over each way: the thread runs the request and joins its response, the loop sends the
    answer while the thread closes the response (which ends Django's request, runs what it deferred to
    the close and returns its database connection). Answers here are JSON and pages, never large, so
    holding one whole costs nothing a stream would save.
    """

    def __init__(self, wsgi_application: WSGIApplication, threads: int):
        self.wsgi_application = wsgi_application
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="request")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: nothing to start or stop
            return
        with SpooledTemporaryFile(max_size=BODY_IN_MEMORY_BYTES) as body:
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away (or was answered for being too slow)
                body.write(message.get("body", b""))
                more = message.get("more_body", False)
            body.seek(0)
            loop = asyncio.get_running_loop()
            answer: asyncio.Future[Answer] = loop.create_future()

            def deliver(response: Answer) -> None:  # on the request thread, before it closes the response
                def settle() -> None:
                    if not answer.done():
                        answer.set_result(response)

                loop.call_soon_threadsafe(settle)

            # In the thread's own context, not a copy of the loop's: Django keeps per-thread state there
            # (the cache clients are an asgiref Local), which a fresh copy per request would rebuild
            # every time (a Redis client, a connection and a PING). It lives as long as the thread.
            job = loop.run_in_executor(self.executor, self._respond, scope, body, deliver)
            either: set[asyncio.Future[Any]] = {answer, job}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                job.result()  # the request failed before it had an answer: raised here, as before
            status, headers, content = await answer
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def _respond(self, scope: Scope, body: IO[bytes], deliver: Callable[[Answer], None]) -> None:
        """Run the request; hand the answer to the loop, then close the response on this thread (Django
        ends its request there: work deferred to the close, like the dashboard counters, follows the
        answer out instead of delaying it, and the thread's database connection is tidied as before)."""
        adapter = WsgiToAsgiInstance(self.wsgi_application)  # asgiref's ASGI scope -> WSGI environ
        adapter.scope = scope
        environ = adapter.build_environ(scope, body)
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> None:
            started[:] = [
                int(status.split(" ", 1)[0]),
                [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers],
            ]

        result = self.wsgi_application(environ, start_response)  # type: ignore[arg-type]  # Django never calls start_response's write()
        close = getattr(result, "close", lambda: None)
        try:
            content = b"".join(result)
        except BaseException:
            close()
            raise
        deliver((started[0], started[1], content))
        try:
            close()
        except Exception:  # the answer is out: nothing to tell the client, but never lost
            logger.exception("closing a response failed")


class BoundedRequest:
    """Bounds each HTTP request's body in time and size, and gives a chunked one its length (see above)."""

    def __init__(self, app: ASGIApplication):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        return await _Request(self.app, scope, receive, send).run()


class _Request:
    def __init__(self, app: ASGIApplication, scope: Scope, receive: Receive, send: Send):
        self.app, self.scope, self._receive, self._send = app, scope, receive, send
        self.headers = {name.lower(): value for name, value in scope["headers"]}
        self.ends_at: float | None = None  # set on the first read of the body
        self.read = 0
        self.body_done = False
        self.answered = False

    async def run(self) -> None:
        length = self.headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > settings.UPLOAD_MAX_REQUEST_BYTES:
            return await self.error(413, "payload_too_large", "The request body is larger than the allowed maximum.")
        if b"chunked" in self.headers.get(b"transfer-encoding", b"").lower() and not length:
            return await self.run_chunked()
        return await self.app(self.scope, self.receive, self._send)

    async def run_chunked(self) -> None:
        body, more = b"", True
        while more and len(body) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            message = await self.receive()
            if message["type"] != "http.request":
                return None  # the client went away, or it was too slow and has its 408
            body += message.get("body", b"")
            more = message.get("more_body", False)
        scope = {**self.scope, "headers": [*self.scope["headers"], (b"content-length", str(len(body)).encode())]}
        replayed = False

        async def receive() -> Message:
            nonlocal replayed
            if replayed:
                return await self.receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, receive, self._send)

    async def receive(self) -> Message:
        """The server's ``receive``, bounded in time and size until the body is complete."""
        if self.answered:
            return DISCONNECT
        if self.body_done:
            return await self._receive()
        loop = asyncio.get_running_loop()
        if self.ends_at is None:
            self.ends_at = loop.time() + settings.REQUEST_BODY_TIMEOUT_S
        try:
            async with asyncio.timeout_at(self.ends_at):
                message = await self._receive()
        except TimeoutError:
            await self.error(408, "request_timeout", "The request body did not arrive in time.")
            return DISCONNECT
        if message["type"] == "http.request":
            self.read += len(message.get("body", b""))
            if self.read > settings.UPLOAD_MAX_REQUEST_BYTES:
                await self.error(413, "payload_too_large", "The request body is larger than the allowed maximum.")
                return DISCONNECT
            self.body_done = not message.get("more_body", False)
        return message

    async def error(self, status: int, code: str, message: str) -> None:
        """Answers for Django, which then sees the client gone and answers nothing more."""
        self.answered = True
        request_id = accepted_request_id(self.headers.get(REQUEST_ID_HEADER.lower().encode(), b"").decode("latin-1"))
        logger.warning(
            "request refused before Django", extra={"status": status, "code": code, "request_id": request_id}
        )
        body = json.dumps(error_document(code, message, request_id)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (REQUEST_ID_HEADER.lower().encode(), request_id.encode()),
            (b"connection", b"close"),
        ]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})


class PathMount:
    """ASGI: requests under ``prefix`` (the path itself or below it) go to ``mounted``, the rest to
    ``app``; the lifespan goes to ``mounted`` (``app``, Django on threads, has none)."""

    def __init__(self, app: ASGIApplication, prefix: str, mounted: ASGIApplication):
        self.app, self.prefix, self.mounted = app, prefix.rstrip("/"), mounted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self.mounted(scope, receive, send)
        path = scope.get("path", "")
        if path == self.prefix or path.startswith(self.prefix + "/"):
            return await self.mounted(scope, receive, send)
        return await self.app(scope, receive, send)
