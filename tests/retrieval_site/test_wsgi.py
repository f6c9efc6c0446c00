"""The WSGI application under a real gunicorn, spoken to over raw sockets: chunked bodies are read, and
Django's own errors on ``/api/`` paths are JSON."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from tenants.services import create_api_key
from tests.conftest import database_url_of_this_run
from tests.factories import TenantFactory

SEARCH = "/api/v1/retrieval/bm25"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def gunicorn_url(django_db_setup, tmp_path_factory):
    """gunicorn serving ``retrieval_site.wsgi`` on 127.0.0.1, on the test database and Redis."""
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C.UTF-8",
        "DATABASE_URL": database_url_of_this_run(),
        "REDIS_URL": settings.REDIS_URL,
        "VAR_DIR": str(settings.VAR_DIR),
        "LOG_LEVEL": "WARNING",
    }
    log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "retrieval_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--threads", "2", "--no-control-socket"],
        cwd=settings.BASE_DIR, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"gunicorn did not start:\n{log.read_text()}")
                time.sleep(0.2)
        yield ("127.0.0.1", port)
    finally:
        server.terminate()
        server.wait(timeout=30)


def exchange(address, raw: bytes, *, half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` as it is; return the status, headers (lower-cased names) and body of the answer."""
    with socket.create_connection(address, timeout=30) as conn:
        conn.sendall(raw)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in header_lines)}
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


def test_a_chunked_body_is_read(gunicorn_url, raw_key):
    head = request_head(raw_key, "Transfer-Encoding: chunked")
    status, _, answer = exchange(gunicorn_url, head + chunked(json.dumps({"query": "kettle", "top_k": 0}).encode()))
    assert status == 400, answer
    error = json.loads(answer)["error"]
    assert error["code"] == "invalid_request" and "top_k" in error["message"] and "query" not in error["message"]

    status, _, answer = exchange(gunicorn_url, head + chunked(json.dumps({"query": "kettle"}).encode()))
    assert status == 200, answer
    assert json.loads(answer)["queries"][0]["text"] == "kettle"


def test_a_chunked_body_over_the_limit_is_413_json(gunicorn_url, raw_key):
    body = json.dumps({"query": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}).encode()
    raw = request_head(raw_key, "Transfer-Encoding: chunked") + chunked(body, size=65536)
    status, headers, answer = exchange(gunicorn_url, raw)
    assert status == 413 and headers["content-type"] == "application/json", answer
    assert json.loads(answer)["error"]["code"] == "payload_too_large"


def test_a_truncated_body_gets_a_json_error(gunicorn_url, raw_key):
    raw = request_head(raw_key, "Content-Length: 100") + b'{"query": "ke'
    status, headers, answer = exchange(gunicorn_url, raw, half_close=True)
    assert 400 <= status < 500, answer
    assert headers["content-type"] == "application/json", answer
    assert "error" in json.loads(answer)


def test_djangos_own_400_is_json_on_api_paths_only(gunicorn_url, raw_key):
    """A Host not in ALLOWED_HOSTS is refused by Django before any view: handler400 answers."""
    raw = request_head(raw_key, "Content-Length: 2").replace(b"Host: 127.0.0.1", b"Host: evil.example") + b"{}"
    status, headers, answer = exchange(gunicorn_url, raw)
    assert status == 400 and headers["content-type"] == "application/json", answer
    assert json.loads(answer)["error"]["code"] == "bad_request"

    page = b"GET /admin/ HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
    status, headers, _ = exchange(gunicorn_url, page)
    assert status == 400 and headers["content-type"].startswith("text/html")
