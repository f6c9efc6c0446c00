"""The served application (``retrieval_site.asgi`` under gunicorn with ``retrieval_site/gunicorn.conf.py``,
as ``./run serve`` starts it), spoken to over raw sockets: slow and idle clients do not hold it,
malformed HTTP and Django's own errors get JSON errors, chunked bodies are read, and request ids,
idempotency and metrics work under it."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import threading

import pytest
from django.conf import settings

from tenants.services import create_api_key
from tests.concurrency import wait_until
from tests.conftest import database_url_of_this_run
from tests.factories import TenantFactory

SEARCH = "/api/v1/retrieval/bm25"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def served(log_dir, *options: str, **environment):
    """gunicorn started like ``./run serve`` (its config file, one worker) on 127.0.0.1, on the test
    database and Redis; ``options`` add to its command line, ``environment`` to its variables."""
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "DATABASE_URL": database_url_of_this_run(),
        "REDIS_URL": settings.REDIS_URL,
        "VAR_DIR": str(settings.VAR_DIR),
        "LOG_LEVEL": "WARNING",
        **environment,
    }
    log = log_dir / "gunicorn.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", "retrieval_site/gunicorn.conf.py",
         "--bind", f"127.0.0.1:{port}", "--workers", "1", *options],
        cwd=settings.BASE_DIR, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip

    def answers_health() -> bool:  # up once /health answers (the worker warms the model up first)
        if server.poll() is not None:
            pytest.fail(f"gunicorn exited:\n{log.read_text()}")
        try:
            health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            return exchange(("127.0.0.1", port), health)[0] == 200
        except (OSError, ValueError, IndexError):
            return False

    try:
        wait_until(answers_health, timeout=120, interval=0.3, message=f"gunicorn to answer /health (log: {log})")
        yield ("127.0.0.1", port)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def server_url(django_db_setup, tmp_path_factory):
    """Patient with slow and idle clients (a loaded machine must not close them mid-test)."""
    patient = {"REQUEST_HEADER_TIMEOUT_S": "600", "REQUEST_BODY_TIMEOUT_S": "600"}
    with served(tmp_path_factory.mktemp("gunicorn"), "--keep-alive", "600", **patient) as address:
        yield address


@pytest.fixture(scope="module")
def impatient_server_url(django_db_setup, tmp_path_factory):
    """Headers and bodies must arrive within 1.5 s."""
    timeouts = {"REQUEST_HEADER_TIMEOUT_S": "1.5", "REQUEST_BODY_TIMEOUT_S": "1.5"}
    with served(tmp_path_factory.mktemp("gunicorn"), **timeouts) as address:
        yield address


def exchange(address, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` as it is on a new connection; the status, headers (lower-cased names) and body of the answer."""
    with socket.create_connection(address, timeout=60) as conn:
        conn.sendall(raw)
        return read_response(conn)


def read_response(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response off ``conn`` (framed by Content-Length, chunks or the connection closing)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a complete answer: {received!r}")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in header_lines)}
    if "content-length" in headers:
        complete = lambda: len(body) >= int(headers["content-length"])  # noqa: E731
    elif headers.get("transfer-encoding") == "chunked":
        complete = lambda: body.endswith(b"0\r\n\r\n")  # noqa: E731
    else:
        complete = lambda: False  # noqa: E731  (until the server closes)
    while not complete():
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    if headers.get("transfer-encoding") == "chunked":
        body = dechunked(body)
    return int(status_line.split()[1]), headers, body


def dechunked(body: bytes) -> bytes:
    data = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return data
        data, body = data + body[:size], body[size + 2 :]


@pytest.fixture
def raw_key(transactional_db) -> str:
    """Committed, so the gunicorn process sees it."""
    return create_api_key(tenant=TenantFactory()).raw_key


def chunked(body: bytes, size: int = 7) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


def request_head(key: str, *headers: str) -> bytes:
    lines = [f"POST {SEARCH} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {key}",
             "Content-Type: application/json", "Connection: close", *headers]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_chunked_body_is_read(server_url, raw_key):
    head = request_head(raw_key, "Transfer-Encoding: chunked")
    status, _, answer = exchange(server_url, head + chunked(json.dumps({"query": "kettle", "top_k": 0}).encode()))
    assert status == 400, answer
    error = json.loads(answer)["error"]
    assert error["code"] == "invalid_request" and "top_k" in error["message"] and "query" not in error["message"]

    status, _, answer = exchange(server_url, head + chunked(json.dumps({"query": "kettle"}).encode()))
    assert status == 200, answer
    assert json.loads(answer)["queries"][0]["text"] == "kettle"


def test_a_chunked_body_over_the_limit_is_413_json(server_url, raw_key):
    body = json.dumps({"query": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}).encode()
    raw = request_head(raw_key, "Transfer-Encoding: chunked") + chunked(body, size=65536)
    status, headers, answer = exchange(server_url, raw)
    assert status == 413 and headers["content-type"] == "application/json", answer
    assert json.loads(answer)["error"]["code"] == "payload_too_large"


def test_djangos_own_400_is_json_on_api_paths_only(server_url, raw_key):
    """A Host not in ALLOWED_HOSTS is refused by Django before any view: handler400 answers."""
    raw = request_head(raw_key, "Content-Length: 2").replace(b"Host: 127.0.0.1", b"Host: evil.example") + b"{}"
    status, headers, answer = exchange(server_url, raw)
    assert status == 400 and headers["content-type"] == "application/json", answer
    assert json.loads(answer)["error"]["code"] == "bad_request"

    page = b"GET /admin/ HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
    status, headers, _ = exchange(server_url, page)
    assert status == 400 and headers["content-type"].startswith("text/html")


# --- malformed HTTP: gunicorn's own answers are the service's JSON errors ---------------------------

GET_HEALTH = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
MALFORMED = {
    "request line too long": ("GET /" + "a" * 5000 + " HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request_line_too_long"),
    "too many headers": (
        GET_HEALTH + "".join(f"X-{i}: 1\r\n" for i in range(150)) + "\r\n",
        431,
        "request_headers_too_large",
    ),
    "oversized header": (GET_HEALTH + "X-Big: " + "b" * 9000 + "\r\n\r\n", 431, "request_headers_too_large"),
    "invalid request line": ("THIS IS NOT HTTP\r\n\r\n", 400, "bad_request"),
    "NUL in a header": (GET_HEALTH + "X-Nul: a\x00b\r\n\r\n", 400, "bad_request"),
    "negative Content-Length": ("POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "bad_request"),
    "bad chunk size": (
        "POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        400,
        "bad_request",
    ),
}


@pytest.mark.parametrize(("raw", "status", "code"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_http_gets_a_json_error(server_url, raw, status, code):
    answered, headers, body = exchange(server_url, raw.encode("latin-1"))
    assert (answered, headers["content-type"]) == (status, "application/json"), body
    error = json.loads(body)["error"]
    assert error["code"] == code and error["message"]
    assert error["request_id"] == headers["x-request-id"] and error["request_id"]


# --- slow and idle clients ---------------------------------------------------------------------------


class Drippers:
    """``count`` connections of each kind, each fed one byte every ``every_s`` on a thread: headers that
    never end, a body that never ends (100 bytes promised), and idle keep-alive connections."""

    def __init__(self, address, key: str, count: int, every_s: float = 0.5):
        self.headers = [socket.create_connection(address, timeout=60) for _ in range(count)]
        self.bodies = [socket.create_connection(address, timeout=60) for _ in range(count)]
        self.idle = [socket.create_connection(address, timeout=60) for _ in range(count)]
        for conn in self.headers:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for conn in self.bodies:
            conn.sendall(request_head(key, "Content-Length: 100").replace(b"Connection: close\r\n", b"") + b"{")
        for conn in self.idle:  # one complete request each, then nothing
            conn.sendall(GET_HEALTH.encode() + b"\r\n")
            assert read_response(conn)[0] == 200
        self.rounds = 0  # of drips sent to every connection
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, args=(every_s,), daemon=True)
        self._thread.start()

    def _drip(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            for conn in self.headers:
                conn.sendall(b"X")  # one more byte of a header name
            for conn in self.bodies:
                conn.sendall(b" ")
            self.rounds += 1

    def all_open(self) -> bool:
        """No connection was answered or closed by the server (so every one is still waiting on it)."""
        for conn in [*self.headers, *self.bodies, *self.idle]:
            conn.setblocking(False)
            try:
                if conn.recv(1, socket.MSG_PEEK) is not None:
                    return False  # data, or b"" (closed)
            except BlockingIOError:
                pass
            finally:
                conn.setblocking(True)
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in [*self.headers, *self.bodies, *self.idle]:
            conn.close()


def test_slow_and_idle_clients_do_not_hold_the_server(server_url, raw_key):
    """150 connections (50 dripping headers, 50 dripping bodies, 50 idle after a request) on one worker:
    health checks and searches are answered while every one of them is still open and waiting."""
    drippers = Drippers(server_url, raw_key, count=50)
    try:
        wait_until(lambda: drippers.rounds >= 2, message="two drips on every connection")
        for _ in range(10):
            assert exchange(server_url, GET_HEALTH.encode() + b"Connection: close\r\n\r\n")[0] == 200
        status, _, answer = exchange(server_url, request_head(raw_key, "Content-Length: 19") + b'{"query": "kettle"}')
        assert status == 200, answer
        assert drippers.all_open()
    finally:
        drippers.close()


def drip_until_answered(conn: socket.socket, byte: bytes, every_s: float = 0.1) -> None:
    """Sends ``byte`` every ``every_s`` (never idle, never done) until the server answers or closes;
    at most 100 of them."""
    for _ in range(100):
        try:
            conn.sendall(byte)
        except OSError:
            return  # the server answered and closed
        if select.select([conn], [], [], every_s)[0]:
            return  # its answer (or its close) is there to read


def test_headers_that_never_end_get_a_json_408(impatient_server_url):
    with socket.create_connection(impatient_server_url, timeout=60) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        drip_until_answered(conn, b"X")  # of a header name
        status, headers, body = read_response(conn)
    assert (status, headers["content-type"]) == (408, "application/json"), body
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_a_body_that_never_ends_gets_a_json_408(impatient_server_url, raw_key):
    head = request_head(raw_key, "Content-Length: 100", "X-Request-ID: slow-body-1")
    with socket.create_connection(impatient_server_url, timeout=60) as conn:
        conn.sendall(head + b"{")
        drip_until_answered(conn, b" ")
        status, headers, body = read_response(conn)
    assert (status, headers["content-type"]) == (408, "application/json"), body
    error = json.loads(body)["error"]
    assert (error["code"], error["request_id"], headers["x-request-id"]) == (
        "request_timeout",
        "slow-body-1",
        "slow-body-1",
    )


def test_an_idle_keep_alive_connection_is_closed(impatient_server_url):
    with socket.create_connection(impatient_server_url, timeout=60) as conn:
        conn.sendall(GET_HEALTH.encode() + b"\r\n")
        assert read_response(conn)[0] == 200
        assert conn.recv(1) == b""  # after gunicorn's keepalive seconds, the server closes it


# --- the platform's features under the ASGI server ---------------------------------------------------


def test_request_ids_idempotency_rate_limits_and_metrics_work_when_served(server_url, raw_key):
    body = b'{"query": "kettle"}'
    head = request_head(raw_key, "Content-Length: 19", "X-Request-ID: served-1", "Idempotency-Key: served-key-1")
    first_status, first_headers, first = exchange(server_url, head + body)
    assert first_status == 200, first
    assert first_headers["x-request-id"] == "served-1"
    assert int(first_headers["x-ratelimit-remaining"]) < int(first_headers["x-ratelimit-limit"])

    again_status, again_headers, again = exchange(server_url, head.replace(b"served-1", b"served-2") + body)
    assert (again_status, again_headers.get("idempotent-replayed"), again) == (200, "true", first)

    status, _, metrics = exchange(server_url, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert status == 200
    assert b'retrieval_kb_versions{status="active"}' in metrics  # read from the database at the scrape
    assert b'retrieval_request_latency_seconds_count{endpoint="retrieval-bm25",mode="bm25"}' in metrics


def test_a_served_search_is_traced_in_the_callers_trace(django_db_setup, tmp_path, raw_key):
    """Tracing on (OTLP to a local collector over a real socket): the request's server span is exported
    from the served process, in the trace the caller's ``traceparent`` names."""
    from tests.peers import Peer, Reply

    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    # The SDK's batches leave every 200 ms instead of 5 s: a loaded machine then still has ~30 s of slack.
    with (
        Peer(lambda request: Reply(body=b"")) as collector,
        served(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="200") as address,
    ):
        head = request_head(raw_key, "Content-Length: 19", f"traceparent: 00-{trace_id}-00f067aa0ba902b7-01")
        assert exchange(address, head + b'{"query": "kettle"}')[0] == 200

        def exported() -> bytes:  # spans leave in batches
            return b"".join(r.body for r in collector.requests if r.path == "/v1/traces")

        # The server span ends last: its batch may follow the one of the search's spans.
        wait_until(
            lambda: bytes.fromhex(trace_id) in exported() and b"/api/v1/retrieval/bm25" in exported(),
            interval=0.1,
            message="the server span, in the caller's trace, at the collector",
        )


def test_a_served_worker_loads_the_model_before_it_takes_a_request(django_db_setup, tmp_path):
    """``post_worker_init`` warms the worker up (``retrieval.warmup``) before it accepts a connection: its
    first requests find the model loaded (else ``/ready`` would answer "loading" while a background
    thread loads it), so no first search, Dify's (which gives up after 5 s) included, waits for it."""
    with served(tmp_path) as address:
        _, _, body = exchange(address, b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert json.loads(body)["checks"]["embedder"]["message"] == f"{settings.EMBEDDING_MODEL} loaded"
