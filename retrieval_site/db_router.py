"""The Django database router of read replicas (``DATABASE_REPLICA_URLS``): ORM reads go where the
context's search chose (``engines.database``: a replica, or the primary), every write and migration to
the primary."""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

from engines.database import read_alias


class ReplicaRouter:
    def db_for_read(self, model: type, **hints: Any) -> str:
        return read_alias()

    def db_for_write(self, model: type, **hints: Any) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # one database, streamed to its replicas

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS
