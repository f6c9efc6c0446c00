"""core.redis: the circuit breaker, on its own and in front of a real listener that accepts connections
and never answers (a hung Redis), through the API; and Celery's spelling of the cache's Redis."""

from __future__ import annotations

import logging
import socket
import threading

import pytest
import redis

from core import redis as core_redis
from core.redis import RedisBreaker, RedisCircuitOpen, celery_redis_url
from core.usage import flush_counts
from tests.concurrency import ManualClock, manual_clock
from tests.factories import KnowledgeBaseFactory


class Calls:
    """A stand-in for one Redis command: fails with ``error`` while set, and counts the calls it gets."""

    def __init__(self) -> None:
        self.count = 0
        self.error: Exception | None = redis.TimeoutError("Timeout reading from socket")

    def __call__(self) -> str:
        self.count += 1
        if self.error is not None:
            raise self.error
        return "PONG"


def fail(breaker: RedisBreaker, calls: Calls, times: int) -> None:
    for _ in range(times):
        with pytest.raises(redis.TimeoutError):
            breaker.call(calls)


def test_the_circuit_opens_after_the_failures_and_skips_redis(caplog):
    breaker, calls = RedisBreaker("test", failures=3, window_s=60, cooldown_s=60), Calls()
    fail(breaker, calls, 3)
    with pytest.raises(RedisCircuitOpen, match="circuit open after 3 failures"):
        breaker.call(calls)
    assert calls.count == 3  # the fourth call never reached Redis
    assert isinstance(RedisCircuitOpen("x"), redis.ConnectionError)  # callers degrade as for any outage
    assert [r.getMessage() for r in caplog.records if "circuit opened" in r.getMessage()]


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    """The breaker's clock, moved by hand: windows and cool-downs pass without waiting."""
    return manual_clock(monkeypatch, core_redis)


def test_failures_outside_the_window_do_not_add_up(clock):
    breaker, calls = RedisBreaker("test", failures=2, window_s=0.1, cooldown_s=60), Calls()
    fail(breaker, calls, 1)
    clock.advance(0.2)
    fail(breaker, calls, 1)
    calls.error = None
    assert breaker.call(calls) == "PONG"


def test_after_the_cooldown_one_probe_closes_or_reopens_the_circuit(caplog, clock):
    caplog.set_level(logging.INFO, logger="core.redis")
    breaker, calls = RedisBreaker("test", failures=1, window_s=60, cooldown_s=0.1), Calls()
    fail(breaker, calls, 1)
    clock.advance(0.15)
    fail(breaker, calls, 1)  # the probe fails: open again for another cool-down
    with pytest.raises(RedisCircuitOpen):
        breaker.call(calls)
    clock.advance(0.15)
    calls.error = None
    assert breaker.call(calls) == "PONG"  # the probe succeeds: closed
    assert breaker.call(calls) == "PONG"
    messages = [record.getMessage() for record in caplog.records]
    assert any("circuit reopened" in m for m in messages) and any("circuit closed" in m for m in messages)


def test_while_a_probe_runs_other_calls_are_still_skipped(clock):
    breaker, calls = RedisBreaker("test", failures=1, window_s=60, cooldown_s=0.05), Calls()
    fail(breaker, calls, 1)
    clock.advance(0.1)
    probing, release = threading.Event(), threading.Event()

    def slow_probe() -> str:
        probing.set()
        release.wait(5)
        return "PONG"

    probe = threading.Thread(target=breaker.call, args=(slow_probe,))
    probe.start()
    probing.wait(5)
    with pytest.raises(RedisCircuitOpen):
        breaker.call(calls)
    release.set()
    probe.join()
    calls.error = None
    assert breaker.call(calls) == "PONG"


def test_an_error_reply_is_an_answer_not_an_outage():
    breaker, calls = RedisBreaker("test", failures=1, window_s=60, cooldown_s=60), Calls()
    calls.error = redis.ResponseError("WRONGTYPE")
    for _ in range(3):
        with pytest.raises(redis.ResponseError):
            breaker.call(calls)
    assert calls.count == 3


# --- a hung Redis: accepts connections, never answers ---------------------------------------------------


class HungRedis:
    """A TCP listener on 127.0.0.1 that accepts every connection and reads, but never answers."""

    def __init__(self) -> None:
        self.received = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closing = threading.Event()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._connections.append(conn)
            threading.Thread(target=self._swallow, args=(conn,), daemon=True).start()

    def _swallow(self, conn: socket.socket) -> None:
        while data := self._recv(conn):
            self.received += len(data)

    @staticmethod
    def _recv(conn: socket.socket) -> bytes:
        try:
            return conn.recv(65536)
        except OSError:
            return b""

    def close(self) -> None:
        self._closing.set()
        self._server.close()
        for conn in self._connections:
            conn.close()


@pytest.fixture
def hung_redis(settings):
    server = HungRedis()
    settings.CACHES = {
        "default": {
            **settings.CACHES["default"],
            "LOCATION": f"redis://127.0.0.1:{server.port}/0",
            "OPTIONS": {**settings.CACHES["default"]["OPTIONS"], "SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        }
    }
    settings.REDIS_BREAKER_FAILURES = 3
    settings.REDIS_BREAKER_COOLDOWN_S = 60
    yield server
    server.close()


@pytest.mark.django_db
def test_a_hung_redis_is_skipped_once_the_circuit_opens(api_client, tenant, hung_redis, settings, client, caplog):
    settings.RATE_LIMIT_FAIL_OPEN = True
    KnowledgeBaseFactory(tenant=tenant)

    def search():
        response = api_client.post("/api/v1/retrieval/bm25", {"query": "refund"}, format="json")
        assert response.status_code == 200, response.content
        return response

    search()
    flush_counts()  # the rate limit, the cache and the usage counters' flush each time out: the circuit opens
    assert hung_redis.received > 0
    assert [r for r in caplog.records if "circuit opened after 3 failures" in r.getMessage()]
    sent = hung_redis.received
    for _ in range(3):
        assert search().json()["cached"] is False
    assert hung_redis.received == sent  # not one more byte went to the hung server

    cache_check = client.get("/ready").json()["checks"]["cache"]
    assert cache_check["ok"] is False and "circuit open" in cache_check["message"]
    assert hung_redis.received == sent


@pytest.mark.django_db
def test_a_hung_redis_with_rate_limits_failing_closed_is_503_with_retry_after(api_client, hung_redis, settings):
    settings.RATE_LIMIT_FAIL_OPEN = False
    for _ in range(4):
        response = api_client.post("/api/v1/retrieval/bm25", {"query": "refund"}, format="json")
        assert response.status_code == 503 and response["Retry-After"]
        assert response.json()["error"]["code"] == "rate_limiter_unavailable"


@pytest.mark.parametrize(
    ("cache_url", "expected"),
    [
        ("unix:///srv/var/redis/redis.sock?db=0", "redis+socket:///srv/var/redis/redis.sock?virtual_host=2"),
        ("redis://cache.internal:6379/0", "redis://cache.internal:6379/2"),
        ("rediss://:secret@cache.internal:6380", "rediss://:secret@cache.internal:6380/2"),
        ("redis://cache.internal:6379/0?socket_timeout=1", "redis://cache.internal:6379/2?socket_timeout=1"),
    ],
)
def test_celery_gets_the_same_server_on_its_own_database(cache_url, expected):
    assert celery_redis_url(cache_url, 2) == expected


def test_the_configured_broker_and_results_reach_the_embedded_redis(settings):
    from retrieval_site.celery import app

    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1)
        assert connection.default_channel.client.ping()
    assert app.backend.client.ping()
    assert settings.CELERY_BROKER_URL != settings.CELERY_RESULT_BACKEND  # separate logical databases
