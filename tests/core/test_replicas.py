"""Read replicas (issue 46 item 1) against a real streaming standby of the embedded server: searches
read a replica that has replayed the tenant's last write, every write goes to the primary, and a
replica that is behind, lagging or down is skipped with a note, never a failed search."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.test.utils import CaptureQueriesContext

from core.replicas import WRITE_POSITION_KEY, choose_reads
from retrieval import search_log
from retrieval.models import SearchLog
from tests.concurrency import wait_until
from tests.conftest import client_for
from tests.core.replica_support import REPLICA_ALIAS, Standby, start_standby, stop_standby

pytestmark = pytest.mark.django_db(transaction=True, databases=[DEFAULT_DB_ALIAS, REPLICA_ALIAS])

KETTLE = "The stainless steel electric kettle boils 1.7 litres of water in under four minutes."
GARDEN = "Tomato seedlings need at least six hours of direct sunlight every day."
TEAPOT = "The porcelain teapot keeps green tea warm for an hour under its knitted cosy."


@pytest.fixture(scope="module")
def standby(django_db_setup, django_db_blocker) -> Iterator[Standby]:
    from django.conf import settings

    if settings.DATABASE_URL:
        pytest.skip("the standby is made from the embedded server's data dir")
    with django_db_blocker.unblock():
        connection.ensure_connection()  # the embedded primary runs, with the test database
    replica = start_standby()
    # as DATABASE_REPLICA_URLS would add it; before the tests' database guards, which name it
    connections.settings[REPLICA_ALIAS] = replica.settings_dict()
    try:
        yield replica
    finally:
        connections[REPLICA_ALIAS].close()
        del connections[REPLICA_ALIAS]
        del connections.settings[REPLICA_ALIAS]
        stop_standby(replica)


@pytest.fixture
def replica(standby, settings) -> Iterator[Standby]:
    """The standby as ``replica_0``, replaying, for this test."""
    settings.REPLICA_MAX_LAG_S = 3600.0
    try:
        yield standby
    finally:
        connections[REPLICA_ALIAS].close()
        del connections[REPLICA_ALIAS]
        connections.settings[REPLICA_ALIAS] = standby.settings_dict()
        on_replica("SELECT pg_wal_replay_resume()")


def on_replica(statement: str, params: list | None = None):
    with connections[REPLICA_ALIAS].cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()


def ingest(folder: Path, tenant, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    call_command("ingest", str(folder), tenant=tenant.name, kb="manuals", no_progress=True, stdout=io.StringIO())


def written_position(tenant) -> str:
    position = cache.get(WRITE_POSITION_KEY.format(tenant_id=tenant.pk))
    assert position, "the ingestion recorded the primary's WAL position"
    return position


def caught_up(position: str) -> bool:
    return on_replica("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [position])[0]


def search(client, query: str) -> dict:
    body = {"query": query, "top_k": 3}
    response = client.post("/api/v1/retrieval/vector", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def nearest_queries(captured) -> list[str]:
    return [query["sql"] for query in captured if "<=>" in query["sql"]]


@pytest.fixture
def manuals(replica, tenant, embedder, tmp_path):
    """The tenant's KB on the primary and replayed by the standby; a client of the tenant."""
    ingest(tmp_path / "manuals", tenant, {"kettle.txt": KETTLE, "garden.txt": GARDEN})
    wait_until(lambda: caught_up(written_position(tenant)), message="the standby replays the ingestion")
    return client_for(tenant)


def test_a_search_reads_a_replica_that_has_the_tenants_last_write_and_writes_the_primary(manuals, tenant):
    logged = SearchLog.objects.using(DEFAULT_DB_ALIAS).count()
    with (
        CaptureQueriesContext(connections[REPLICA_ALIAS]) as on_standby,
        CaptureQueriesContext(connection) as on_primary,
    ):
        answer = search(manuals, "electric kettle water")

    assert answer["results"][0]["content"] == KETTLE
    assert not [note for note in answer["notes"] if "replica" in note]
    assert nearest_queries(on_standby.captured_queries)  # the vector leg read the standby
    assert not nearest_queries(on_primary.captured_queries)
    # the search's analytics row is written on the primary (the standby refuses writes)
    search_log.flush()
    assert SearchLog.objects.using(DEFAULT_DB_ALIAS).count() == logged + 1


def test_a_search_right_after_a_write_reads_the_primary_until_the_replica_replays_it(manuals, tenant, tmp_path):
    on_replica("SELECT pg_wal_replay_pause()")
    ingest(tmp_path / "more", tenant, {"teapot.txt": TEAPOT})
    assert not caught_up(written_position(tenant))

    with CaptureQueriesContext(connections[REPLICA_ALIAS]) as on_standby:
        answer = search(manuals, "porcelain teapot green tea")

    assert answer["results"][0]["content"] == TEAPOT  # the write is seen
    assert not nearest_queries(on_standby.captured_queries)
    assert f"read replica {REPLICA_ALIAS} skipped: it has not replayed this tenant's last write yet" in answer["notes"]

    on_replica("SELECT pg_wal_replay_resume()")
    wait_until(lambda: caught_up(written_position(tenant)), message="the standby replays the new document")
    with CaptureQueriesContext(connections[REPLICA_ALIAS]) as on_standby:
        answer = search(manuals, "a teapot of porcelain for green tea")  # another query: not the cached answer
    assert answer["results"][0]["content"] == TEAPOT
    assert nearest_queries(on_standby.captured_queries)


def test_a_replica_lagging_more_than_the_limit_is_skipped(manuals, tenant, settings):
    settings.REPLICA_MAX_LAG_S = 0.0
    on_replica("SELECT pg_wal_replay_pause()")
    with connection.cursor() as cursor:  # a write of another tenant: WAL the paused standby receives
        cursor.execute("CREATE TABLE replica_lag_probe (id int); DROP TABLE replica_lag_probe")
    wait_until(
        lambda: on_replica("SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()")[0],
        message="the standby receives WAL it does not replay",
    )

    alias, notes = choose_reads(tenant.pk)
    answer = search(manuals, "electric kettle water")

    assert alias == DEFAULT_DB_ALIAS
    assert any(note.startswith(f"read replica {REPLICA_ALIAS} skipped: it lags") for note in notes)
    assert answer["results"][0]["content"] == KETTLE
    assert any("skipped: it lags" in note for note in answer["notes"])


def test_a_replica_that_is_down_is_skipped_with_a_note(manuals, tenant, tmp_path):
    connections[REPLICA_ALIAS].close()
    connections.settings[REPLICA_ALIAS] = {
        **connections.settings[REPLICA_ALIAS],
        "HOST": str(tmp_path),  # no server listens there
    }
    del connections[REPLICA_ALIAS]

    answer = search(manuals, "electric kettle water")

    assert answer["results"][0]["content"] == KETTLE
    assert f"read replica {REPLICA_ALIAS} skipped: it cannot be reached" in answer["notes"]


def test_while_redis_is_down_searches_read_the_primary(replica, tenant, private_redis):
    """The tenant's last write position is unknown, so no replica is known to have it."""
    private_redis()  # stopped: the cache's commands fail

    alias, notes = choose_reads(tenant.pk)

    assert alias == DEFAULT_DB_ALIAS
    assert notes == ["read replicas skipped: this tenant's last write position is unknown (Redis)"]
