"""A fake remote service for tests: a real HTTP server on 127.0.0.1 whose answers each test decides.

The clients under test (embedder, reranker, LLM expander, Elasticsearch adapter) talk to it over a
real socket, so timeouts, refused connections, status codes and malformed bodies reach them as they
would in production; the peer records every request, and how its answer ended, for the test to
inspect: a client that hung up before the answer was out (its timeout or deadline) is recorded, so no
test needs to time the client.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

POLL_S = 0.01  # how often a held answer looks whether its client is still there


@dataclass
class PeerRequest:
    """One request as the peer received it. Header names are lower-cased: HTTP ignores their case.

    ``outcome`` is how its answer ended: ``pending`` while the peer holds it back or sends it,
    ``answered`` once all of it went out, ``hung_up`` when the client closed the connection first (it
    stopped waiting), ``cut_short`` when the peer was closed first."""

    method: str
    path: str  # without the query string, which is parsed into ``params``
    params: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    outcome: str = "pending"

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """The peer's answer. A bytes body is sent as it is, any other as JSON (``None`` as ``null``), so
    tests can send both garbage and any JSON value; ``delay_s`` holds the answer back to provoke timeouts;
    ``drip_s`` sends it (status line and headers too) one byte per ``drip_s``, so no read ever times out."""

    status: int = 200
    body: object = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drip_s: float = 0.0


class Peer:
    """A remote service on 127.0.0.1 (a free port) whose answers a test decides, over a real socket.

    ``respond`` runs on a server thread for every request, whatever its method. Each connection
    carries one request (HTTP/1.0, ``BaseHTTPRequestHandler``'s default), so no keep-alive state links
    a test's calls. ``close()`` cuts short any answer still being delayed, so no handler outlives the test.
    """

    def __init__(self, respond: Callable[[PeerRequest], Reply]) -> None:
        self.respond = respond
        self.requests: list[PeerRequest] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server(self)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        # A short poll interval keeps close() (which waits for the serving loop) fast.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stops listening (later connections are refused); safe to call twice."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _answer(self, request: PeerRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
        return self.respond(request)


class _Server(ThreadingHTTPServer):
    def __init__(self, peer: Peer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.peer = peer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _serve(self) -> None:
        url = urlsplit(self.path)
        request = PeerRequest(
            method=self.command,
            path=url.path,
            params=parse_qs(url.query),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=self.rfile.read(int(self.headers.get("Content-Length") or 0)),
        )
        reply = self.server.peer._answer(request)
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        if not self._hold(request, reply.delay_s):
            return
        if reply.drip_s:
            self._drip(request, reply, payload)
            return
        try:
            self.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:
            request.outcome = "hung_up"
            return
        request.outcome = "answered"

    def _drip(self, request: PeerRequest, reply: Reply, payload: bytes) -> None:
        headers = {"Content-Type": "application/json", **reply.headers, "Content-Length": str(len(payload))}
        head = f"HTTP/1.0 {reply.status} OK\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        try:
            for byte in (head + "\r\n").encode() + payload:
                if not self._hold(request, reply.drip_s):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:
            request.outcome = "hung_up"
            return
        request.outcome = "answered"

    def _hold(self, request: PeerRequest, seconds: float) -> bool:
        """Holds the answer back ``seconds``; False, with the request's outcome set, as soon as the
        client hangs up or the peer closes."""
        ends_at = time.monotonic() + seconds
        while not self._client_gone():
            remaining = ends_at - time.monotonic()
            if remaining <= 0:
                return True
            if self.server.peer._closing.wait(min(remaining, POLL_S)):
                request.outcome = "cut_short"
                return False
        request.outcome = "hung_up"
        return False

    def _client_gone(self) -> bool:
        """The client closed its end: the request was read whole, so a readable socket means EOF."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

    def log_message(self, *args: object) -> None:
        pass


class EmbeddingServer(Peer):
    """``POST /v1/embeddings`` backed by the real local model; ``mode`` injects faults, ``outage``
    answers that many requests with a 500 first (a transient outage). With ``tokens_per_input`` set,
    the answer's ``usage`` says it read that many tokens per input (token counts a test knows)."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.mode = "ok"
        self.outage = 0
        self.failing_inputs: set[str] = set()  # a request holding one of these texts gets a 500
        self.tokens_per_input: int | None = None
        super().__init__(self.embeddings)

    def embeddings(self, request: PeerRequest) -> Reply:
        if self.failing_inputs & set(request.json()["input"]):
            return Reply(500, {"error": "cannot embed this text"})
        if self.outage > 0:
            self.outage -= 1
            return Reply(500, {"error": "temporarily unavailable"})
        if self.mode == "500":
            return Reply(500, {"error": "boom"})
        if self.mode == "garbage":
            return Reply(body=b"<html>not json</html>")
        vectors = self.embedder.embed_documents(request.json()["input"])
        data = [{"index": i, "embedding": vector.tolist()} for i, vector in enumerate(vectors)]
        if self.mode == "short":
            data = data[:-1]
        data.reverse()  # clients must order by "index", not by position
        delay_s, drip_s = (1.5 if self.mode == "slow" else 0.0), (0.05 if self.mode == "drip" else 0.0)
        body: dict[str, object] = {"object": "list", "data": data}
        if self.tokens_per_input is not None:
            tokens = self.tokens_per_input * len(vectors)
            body["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        return Reply(body=body, delay_s=delay_s, drip_s=drip_s)


class Website(Peer):
    """A small web site on 127.0.0.1: ``pages`` maps a path to its body and content type; each page has
    an ETag (its content's hash) and a Last-Modified, and answers a matching conditional GET with 304.
    ``redirects`` maps a path to a Location; any other path is a 404."""

    def __init__(self):
        import hashlib

        self.pages: dict[str, tuple[bytes, str]] = {}
        self.redirects: dict[str, str] = {}
        self.last_modified = "Tue, 01 Dec 2026 07:00:00 GMT"
        self._etag = lambda body: '"' + hashlib.md5(body).hexdigest() + '"'
        super().__init__(self.serve)

    def serve(self, request: PeerRequest) -> Reply:
        if request.path in self.redirects:
            return Reply(302, b"", {"Location": self.redirects[request.path]})
        if request.path not in self.pages:
            return Reply(404, b"not found", {"Content-Type": "text/plain"})
        body, content_type = self.pages[request.path]
        validators = {"ETag": self._etag(body), "Last-Modified": self.last_modified}
        if request.headers.get("if-none-match") == validators["ETag"] or (
            "if-none-match" not in request.headers and request.headers.get("if-modified-since") == self.last_modified
        ):
            return Reply(304, b"", validators)
        return Reply(200, body, {"Content-Type": content_type, **validators})
