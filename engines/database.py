"""Which database connection a search's reads use: the primary's, or a read replica's.

The search chooses (``core.replicas.search_reads``) and sets it for its context (copied into its pool
threads); the Django router (``retrieval_site.db_router``) sends the ORM's reads there, and the raw
SQL of the read paths (the vector leg, the graph, hydration) asks :func:`read_connection`. Writes
always use the primary's ``connection``. Inside a transaction on the primary every read stays there:
it must see the transaction's own rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

_read_alias: ContextVar[str] = ContextVar("read_alias", default=DEFAULT_DB_ALIAS)
# Why this context's reads are not on a replica although replicas are configured (a search's notes).
_read_notes: ContextVar[tuple[str, ...]] = ContextVar("read_notes", default=())


def read_alias() -> str:
    """The database alias of this context's reads."""
    alias = _read_alias.get()
    if alias != DEFAULT_DB_ALIAS and connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    return alias


def read_connection() -> BaseDatabaseWrapper:
    """The connection of this context's reads (the primary's unless a search chose a replica)."""
    return connections[read_alias()]


def read_notes() -> list[str]:
    return list(_read_notes.get())


@contextlib.contextmanager
def reading_from(alias: str, notes: list[str] | None = None) -> Iterator[None]:
    """Within the block, this context reads from ``alias`` (with ``notes`` on why not a replica)."""
    alias_token = _read_alias.set(alias)
    notes_token = _read_notes.set(tuple(notes or ()))
    try:
        yield
    finally:
        _read_alias.reset(alias_token)
        _read_notes.reset(notes_token)
