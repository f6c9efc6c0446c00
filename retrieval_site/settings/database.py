"""The database: a PostgreSQL + pgvector server at DATABASE_URL, else the embedded one under VAR_DIR."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import dj_database_url
from pydantic import AfterValidator, Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from core.embedded_postgres import EMBEDDED_DATABASE
from retrieval_site.settings.base import CommaList, Section


def _physical_memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def _database_url(value: str) -> str:
    if value and dj_database_url.parse(value).get("OPTIONS", {}).get("server_side_binding"):  # unknown schemes raise
        # A vector search sends its planner settings and its query in one message, which PostgreSQL
        # accepts only as a simple query: client-side binding (psycopg's and Django's default).
        raise ValueError("server_side_binding is not supported: vector search needs client-side binding")
    return value


def pooled_database(database: Mapping[str, Any]) -> dict[str, Any]:
    """A Django database's settings for a connection through a transaction-mode pooler: each transaction
    (each statement in autocommit) may run on another server connection, so nothing may live in a session.
    Startup options are refused by pgbouncer (the vector engine sets its planner settings per query),
    psycopg must not prepare statements (the name would be missing on the next server connection), and
    ``QuerySet.iterator()`` must not open a server-side cursor outside a transaction."""
    options = {key: value for key, value in database.get("OPTIONS", {}).items() if key != "options"}
    return {**database, "OPTIONS": {**options, "prepare_threshold": None}, "DISABLE_SERVER_SIDE_CURSORS": True}


def database_name(url: str) -> str:
    return dj_database_url.parse(url)["NAME"] if url else EMBEDDED_DATABASE


class Database(Section):
    title = "Database"

    DATABASE_URL: Annotated[str, AfterValidator(_database_url)] = ""  # unset: the embedded server
    EMBEDDED_PG_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "pgdata")
    # The embedded server's memory (ignored with DATABASE_URL), applied when it starts: its buffer cache
    # should hold the HNSW index and the rows a search reads (~400 MB at 100k chunks, ~5 GB at 1M); the
    # default is a quarter of this machine's memory (at least 128 MB), as on a dedicated server. PostgreSQL
    # touches its buffers as it fills them, so a small KB does not take the quarter. The planner's
    # estimate of all caches: half of the memory.
    EMBEDDED_PG_SHARED_BUFFERS_MB: PositiveInt = Field(default_factory=lambda: max(128, _physical_memory_mb() // 4))
    EMBEDDED_PG_EFFECTIVE_CACHE_SIZE_MB: PositiveInt = Field(
        default_factory=lambda: max(512, _physical_memory_mb() // 2)
    )
    DB_CONN_MAX_AGE: NonNegativeInt = 60
    # DATABASE_URL (and the replicas' URLs) lead to a pooler in transaction mode (pgbouncer): no startup
    # options (pgbouncer refuses them), no prepared statements, no server-side cursors, as such a pooler
    # gives each transaction whichever server connection is free (docs/operations.md, "Connection pooler").
    DATABASE_POOLED: bool = False
    # Streaming replicas of DATABASE_URL (or of the embedded server) for searches' reads; a search reads one
    # only once it has replayed the tenant's last write, lags at most REPLICA_MAX_LAG_S and answers within
    # REPLICA_CONNECT_TIMEOUT_S, else another or the primary (core.replicas).
    DATABASE_REPLICA_URLS: Annotated[CommaList, AfterValidator(lambda urls: [_database_url(url) for url in urls])] = []
    REPLICA_MAX_LAG_S: NonNegativeFloat = 10.0
    REPLICA_CONNECT_TIMEOUT_S: PositiveInt = 2
    TEST_DATABASE_NAME: str = "test_retrieval"
