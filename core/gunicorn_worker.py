"""gunicorn's asyncio (ASGI) worker, answering malformed HTTP with the service's JSON errors.

``./run serve`` and docker-compose run ``-k core.gunicorn_worker.Worker`` on ``retrieval_site.asgi``.
The worker parses HTTP on an event loop, so a client that drips its headers or body, or idles on a
keep-alive connection, holds a coroutine rather than a thread (Django runs each request on a thread
of its own once the request is complete). On top of gunicorn's own worker this adds:

* the answers gunicorn makes itself to requests it cannot parse (a request line or header over the
  limits, too many headers, a NUL or a space in a header, a bad ``Content-Length``, broken chunked
  framing) are ``{"error": {"code", "message", "request_id"}}`` with ``X-Request-ID``, not text;
* the first request's headers must arrive within ``REQUEST_HEADER_TIMEOUT_S`` (else a 408); later
  requests on a connection have gunicorn's ``keepalive`` seconds, and bodies are bounded by
  :mod:`core.asgi`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.workers import gasgi

logger = logging.getLogger(__name__)

# Status of gunicorn's own answers -> the service's error code.
CODES = {
    400: "bad_request",
    408: "request_timeout",
    414: "request_line_too_long",
    426: "upgrade_required",
    431: "request_headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}


class JSONErrorProtocol(ASGIProtocol):  # type: ignore[misc]  # gunicorn has no types
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        from django.conf import settings

        self._header_timer = self.worker.loop.call_later(settings.REQUEST_HEADER_TIMEOUT_S, self._headers_too_slow)

    def _on_headers_complete(self) -> Any:
        self._cancel_header_timer()
        return super()._on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._closed:
            return
        self._send_error_response(408, "The request headers did not arrive in time.")
        self._close_transport()
        self._request_ready.set()  # the connection loop wakes, sees the connection closed, and ends

    def _send_error_response(self, status: int, message: str, extra_headers: Iterable[tuple[str, str]] = ()) -> None:
        from core.errors import error_document  # Django is set up once the worker has loaded the app

        request_id = uuid.uuid4().hex  # the request could not be read, so no X-Request-ID of the client's
        code = CODES.get(status, "bad_request" if status < 500 else "internal_error")
        logger.warning(
            "request refused by the server", extra={"status": status, "code": code, "request_id": request_id}
        )
        body = json.dumps(error_document(code, _message(status, message), request_id)).encode()
        headers = "".join(f"{name}: {value}\r\n" for name, value in extra_headers)
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"X-Request-ID: {request_id}\r\n"
            f"{headers}"
            "Connection: close\r\n"
            "\r\n"
        )
        self._safe_write(head.encode("latin-1"))
        self._safe_write(body)


def _message(status: int, detail: str) -> str:
    """gunicorn's detail (it may quote the request) after a sentence a client can act on."""
    summary = {
        400: "The request is not valid HTTP",
        408: "The request took too long to arrive",
        414: "The request line is too long",
        431: "The request headers are too many or too large",
        501: "The request uses a transfer coding this server does not implement",
    }.get(status, "The request could not be served")
    return f"{summary}: {detail}" if detail and detail not in summary else f"{summary}."


class Worker(gasgi.ASGIWorker):  # type: ignore[misc]  # gunicorn has no types
    """gunicorn's ASGI worker with :class:`JSONErrorProtocol` on every connection."""

    def init_process(self) -> None:
        # gasgi's serving loop makes its connections with the module's ``ASGIProtocol``; this process
        # runs this worker class only, so it is pointed at the subclass before the loop starts.
        gasgi.ASGIProtocol = JSONErrorProtocol
        super().init_process()
