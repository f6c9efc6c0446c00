"""The embedded PostgreSQL starts with the service's memory settings: a real server in a data dir of its own."""

import shutil
import uuid

import psycopg
import pytest
from django.conf import settings

from core.embedded_postgres import EMBEDDED_DATABASE, EMBEDDED_USER, start_embedded_postgres, stop_embedded_postgres


@pytest.fixture
def data_dir():
    # Inside the project like the service's own (as root, embedded-postgres opens the parent folders).
    path = settings.VAR_DIR / f"test-pgdata-{uuid.uuid4().hex[:8]}"
    yield path
    stop_embedded_postgres(path)
    shutil.rmtree(path, ignore_errors=True)


def _shown(socket_dir, *names: str) -> list[str]:
    with psycopg.connect(host=str(socket_dir), user=EMBEDDED_USER, dbname=EMBEDDED_DATABASE) as connection:
        return [connection.execute(f"SHOW {name}").fetchone()[0] for name in names]


def test_a_started_server_runs_with_the_settings_given_and_a_restart_takes_new_ones(data_dir):
    socket_dir = start_embedded_postgres(data_dir, {"shared_buffers": "24MB", "effective_cache_size": "640MB"})
    assert _shown(socket_dir, "shared_buffers", "effective_cache_size") == ["24MB", "640MB"]

    # Attaching to the running server changes nothing; the next start applies what is asked then.
    start_embedded_postgres(data_dir, {"shared_buffers": "40MB"})
    assert _shown(socket_dir, "shared_buffers") == ["24MB"]
    assert stop_embedded_postgres(data_dir)
    socket_dir = start_embedded_postgres(data_dir, {"shared_buffers": "40MB"})
    assert _shown(socket_dir, "shared_buffers", "effective_cache_size") == ["40MB", "4GB"]  # 4GB: PostgreSQL's own
    assert (data_dir / "postgresql.conf").read_text().count("include_if_exists = 'retrieval.conf'") == 1
