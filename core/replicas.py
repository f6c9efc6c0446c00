"""Read replicas for searches (``DATABASE_REPLICA_URLS``), with read-your-writes.

Every write that changes what a tenant's searches see (an ingestion, a relabel or delete, a version
switch, a vocabulary change) records the primary's WAL position once it commits
(:func:`record_write`, in Redis per tenant). A search (:func:`search_reads`) reads from a replica only
once that replica has replayed that position and lags at most ``REPLICA_MAX_LAG_S``; a replica that is
down, lagging or behind is skipped with a note, and with none left the search reads the primary. So a
search right after a write sees it, and nothing about a replica ever makes a search fail.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction

from core.redis import REDIS_ERRORS
from engines.database import reading_from

logger = logging.getLogger(__name__)

REPLICA_PREFIX = "replica_"
WRITE_POSITION_KEY = "replica-write-lsn:{tenant_id}"
WRITE_POSITION_TTL_S = 7 * 24 * 3600  # far past any lag a replica is still used at

# Lag: none while the replica has replayed all it received (an idle primary sends nothing); else the
# time since the last transaction it replayed (unknown counts as infinite).
STATUS_QUERY = (
    "SELECT pg_is_in_recovery(), "
    "CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 "
    "ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 'Infinity') END, "
    "coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, true)"
)


def replica_aliases() -> list[str]:
    """The configured replicas' database aliases (``replica_0``, ...)."""
    return [alias for alias in connections.settings if alias.startswith(REPLICA_PREFIX)]


def record_write(tenant_id: int) -> None:
    """Once the current transaction commits (now, in autocommit): the primary's WAL position, which a
    replica must have replayed before this tenant's searches read from it. Nothing without replicas."""
    if replica_aliases():
        transaction.on_commit(lambda: _store_write_position(tenant_id))


def _store_write_position(tenant_id: int) -> None:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        position = cursor.fetchone()[0]
    try:
        cache.set(WRITE_POSITION_KEY.format(tenant_id=tenant_id), position, WRITE_POSITION_TTL_S)
    except REDIS_ERRORS as exc:
        # While Redis is down, searches cannot read a position either, and read the primary.
        logger.warning("the write position of tenant %s was not recorded: %s", tenant_id, exc)


def written_position(tenant_id: int) -> tuple[bool, str | None]:
    """Whether Redis could say, and the tenant's last recorded write position (None: no write within
    the TTL)."""
    try:
        position = cache.get(WRITE_POSITION_KEY.format(tenant_id=tenant_id))
    except REDIS_ERRORS:
        return False, None
    return True, position if isinstance(position, str) else None


def choose_reads(tenant_id: int) -> tuple[str, list[str]]:
    """The alias this tenant's search reads from now, and notes on each replica skipped."""
    aliases = replica_aliases()
    if not aliases:
        return DEFAULT_DB_ALIAS, []
    known, position = written_position(tenant_id)
    if not known:
        return DEFAULT_DB_ALIAS, ["read replicas skipped: this tenant's last write position is unknown (Redis)"]
    notes = []
    for alias in random.sample(aliases, len(aliases)):  # spread the searches over the replicas
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute(STATUS_QUERY, [position or "0/0"])
                in_recovery, lag_s, replayed = cursor.fetchone()
        except DatabaseError as exc:
            connections[alias].close()  # reconnect on the next search
            logger.warning("read replica %s is down: %s", alias, exc)
            notes.append(f"read replica {alias} skipped: it cannot be reached")
            continue
        if in_recovery and float(lag_s) > settings.REPLICA_MAX_LAG_S:
            notes.append(f"read replica {alias} skipped: it lags {float(lag_s):.1f} s (REPLICA_MAX_LAG_S)")
        elif not replayed:
            notes.append(f"read replica {alias} skipped: it has not replayed this tenant's last write yet")
        else:
            return alias, notes
    return DEFAULT_DB_ALIAS, [*notes, "searched on the primary"] if notes else []


@contextlib.contextmanager
def search_reads(tenant_id: int) -> Iterator[None]:
    """Around a search: its reads on a replica that has this tenant's last write, else the primary."""
    alias, notes = choose_reads(tenant_id)
    with reading_from(alias, notes):
        yield
