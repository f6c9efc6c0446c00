"""Uniqueness is the database's to enforce: a write that breaks a named unique constraint becomes the
domain's conflict (or is resolved by the writer), so two concurrent creates give one success and one
409, never a check-then-insert race or a 500.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import IntegrityError, transaction


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
