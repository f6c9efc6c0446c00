"""Uniqueness is the database's to enforce: a write that breaks a named unique constraint becomes the
domain's conflict (or is resolved by the writer), so two concurrent creates give one success and one
409, never a check-then-insert race or a 500.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import psycopg
from django.db import IntegrityError, transaction

T = TypeVar("T")


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
