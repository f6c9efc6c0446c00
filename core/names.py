"""The one rule for the names people give things (knowledge bases, API keys, tenants): printable
Unicode (no ``HIDDEN`` character), at most ``NAME_MAX_LENGTH`` characters, not blank, stored trimmed.

A name is shown in the console, logs and answers and compared for uniqueness; a control character
(``\\u0001``), a format character or a lone surrogate in one is invisible or unencodable there, so it is
refused rather than stored (or silently dropped by a later step)."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from rest_framework import status

from core.errors import DomainError

NAME_MAX_LENGTH = 100
# What no name may hold, as a regex character range (the OpenAPI schema states the same pattern): C0 and C1
# control characters and DEL, the soft hyphen, the zero-width and direction marks, line and paragraph
# separators, word joiners and invisible operators, the byte-order mark and the interlinear annotations.
HIDDEN = r"\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb"
# A name: no hidden character, at least one that is not whitespace (surrounding spaces are trimmed).
NAME_PATTERN = rf"^[^{HIDDEN}]*[^\s{HIDDEN}][^{HIDDEN}]*$"
_HIDDEN_CHAR = re.compile(rf"[{HIDDEN}]")


class InvalidName(DomainError):
    status_code = status.HTTP_400_BAD_REQUEST
    code = "invalid_name"


def name_problem(value: object, *, max_length: int = NAME_MAX_LENGTH, allow_blank: bool = False) -> str | None:
    """Why ``value`` is no acceptable name (its surrounding spaces are trimmed after), or None."""
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if hidden := _HIDDEN_CHAR.search(value):
        return (
            f"must be printable: U+{ord(hidden.group()):04X} at position {hidden.start()} is a control or invisible "
            "character"
        )
    if not value.strip() and not allow_blank:
        return "must not be blank"
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
