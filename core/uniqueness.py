"""Uniqueness is the database's to enforce: a write that breaks a named unique constraint becomes the
domain's conflict (or is resolved by the writer), so two concurrent creates give one success and one
409, never a check-then-insert race or a 500. Where a table has no constraint to break (a third-party
app's), :func:`get_or_create_serialized` makes its creators take turns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from django.db import IntegrityError, connection, models, transaction

T = TypeVar("T")
M = TypeVar("M", bound=models.Model)

# pg_advisory_xact_lock(class, hash of the table and values): get_or_create_serialized's turns.
_GET_OR_CREATE_LOCK_CLASS = 15_004


def violated_unique_constraint(error: IntegrityError) -> str | None:
    """The name of the unique constraint ``error`` broke, or None when it broke something else."""
    cause = error.__cause__
    return cause.diag.constraint_name if isinstance(cause, psycopg.errors.UniqueViolation) else None


@contextmanager
def conflict_on(constraint: str, conflict: Exception) -> Iterator[None]:
    """Runs the block in a savepoint; breaking ``constraint`` raises ``conflict`` instead (the
    transaction around stays usable), any other integrity error passes unchanged."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as error:
        if violated_unique_constraint(error) != constraint:
            raise
        raise conflict from error


def redrawn_on_collision(constraint: str, insert: Callable[[], T], *, attempts: int = 3) -> T:
    """``insert()``, which draws a random unique value (a key prefix, a task id) and stores it, drawn
    again while the value is already stored under ``constraint``; the last collision raises. Random
    values of 48 bits or more about never collide: this settles the time they do."""
    for _ in range(attempts - 1):
        try:
            with transaction.atomic():
                return insert()
        except IntegrityError as error:
            if violated_unique_constraint(error) != constraint:
                raise
    with transaction.atomic():
        return insert()


def get_or_create_serialized(model: type[M], **fields: Any) -> M:
    """The oldest ``model`` row with ``fields``, created when there is none, for a table without a unique
    constraint on them (django-celery-beat's schedules: two concurrent ``get_or_create`` calls make two
    rows, and every later one then fails with ``MultipleObjectsReturned``). Creators of the same values
    take one transaction-scoped advisory lock in turn, so the second looks only once the first's row is
    committed; duplicates made before are tolerated (the oldest is used). Two different values hashing
    alike only wait for each other."""
    values = json.dumps([model._meta.db_table, sorted(fields.items())], default=str)
    key = int.from_bytes(hashlib.sha256(values.encode()).digest()[:4], "big", signed=True)
    manager = model._default_manager
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_GET_OR_CREATE_LOCK_CLASS, key])
        existing = manager.filter(**fields).order_by("pk").first()
        return existing if existing is not None else manager.create(**fields)
