"""The one rule for the names people give things (knowledge bases, API keys, tenants): printable
Unicode, trimmed, between 1 and ``NAME_MAX_LENGTH`` characters.

A name is shown in the console, logs and answers and compared for uniqueness; a control character
(``\\u0001``), a format character or a lone surrogate in one is invisible or unencodable there, so it is
refused rather than stored (or silently dropped by a later step)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from rest_framework import status

from core.errors import DomainError

NAME_MAX_LENGTH = 100


class InvalidName(DomainError):
    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid_name"


def name_problem(value: object, *, max_length: int = NAME_MAX_LENGTH, allow_blank: bool = False) -> str | None:
    """Why ``value`` is no acceptable name (untrimmed: its surrounding whitespace is ignored), or None."""
    if not isinstance(value, str):
        return "must be a string"
    trimmed = value.strip()
    if not trimmed and not allow_blank:
        return "must not be blank"
    if len(trimmed) > max_length:
        return f"must be at most {max_length} characters"
    for position, char in enumerate(trimmed):
        if not (char.isprintable() or char == " "):
            return f"must be printable: U+{ord(char):04X} at position {position} is a control or invisible character"
    return None


def checked_name(value: str, *, field: str = "name", allow_blank: bool = False) -> str:
    """``value`` trimmed, or ``InvalidName`` naming the field and the offending character."""
    problem = name_problem(value, allow_blank=allow_blank)
    if problem is not None:
        raise InvalidName(f"{field} {problem}", details={field: [problem]})
    return value.strip()


def form_name(value: str, *, allow_blank: bool = False) -> str:
    """``checked_name`` for a Django form's ``clean_name``: a form error instead of an API error."""
    problem = name_problem(value, allow_blank=allow_blank)
    if problem is not None:
        raise ValidationError(f"The name {problem}.")
    return value.strip()
