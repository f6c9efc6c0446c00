"""Principals: who a document admits and who a search reads as (issue 48, docs/permissions.md).

A principal is ``user:<id>``, ``group:<id>`` or ``*`` (everyone in the tenant). A document's ACL is a
list of them; a reader is the set of principals a search runs as, always holding ``*``. A reader may
read a document when the two share one principal. Plain functions with no model: knowledge and
retrieval both use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.core.exceptions import ValidationError

EVERYONE = "*"
PUBLIC_ACL = (EVERYONE,)
MAX_PRINCIPALS = 100
MAX_PRINCIPAL = 200
# No white space and no control character, spelled out: Python's \s also matches \x1c-\x1f, a JSON Schema
# validator's (ECMA) does not, so the OpenAPI schema's pattern and this check would disagree.
_NOT_IN_A_NAME = r"\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
PRINCIPAL_PATTERN = rf"^(?:\*|(?:user|group):[^{_NOT_IN_A_NAME}]{{1,{MAX_PRINCIPAL - 6}}})$"
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)


class InvalidPrincipals(ValueError):
    """A list of principals that is not one: the message names what is wrong."""


def public_acl() -> list[str]:
    """The default ACL of a KB: everyone in the tenant (a callable default for model fields)."""
    return list(PUBLIC_ACL)


def clean_principals(value: object, *, where: str = "principals", allow_empty: bool = True) -> list[str]:
    """``value`` as a list of valid principals, duplicates dropped, order kept; else ``InvalidPrincipals``."""
    if not isinstance(value, (list, tuple)):
        raise InvalidPrincipals(f"{where} must be a list of strings")
    if len(value) > MAX_PRINCIPALS:
        raise InvalidPrincipals(f"{where}: more than {MAX_PRINCIPALS} principals")
    for item in value:
        if not isinstance(item, str) or not _PRINCIPAL.fullmatch(item):  # fullmatch: "$" admits a final newline
            raise InvalidPrincipals(
                f"{where}: {item!r} is not a principal ('user:<id>', 'group:<id>' or '*', "
                f"at most {MAX_PRINCIPAL} characters, no white space)"
            )
    if not value and not allow_empty:
        raise InvalidPrincipals(f"{where} must not be empty")
    return list(dict.fromkeys(value))


def reader_of(principals: Iterable[str]) -> tuple[str, ...]:
    """A reader's principals as searches and cache keys use them: sorted, unique, ``*`` always among them."""
    return tuple(sorted({EVERYONE, *principals}))


def validate_principals(value: object) -> None:
    """A model field's validator: a ``ValidationError`` naming what is wrong."""
    try:
        clean_principals(value)
    except InvalidPrincipals as error:
        raise ValidationError(str(error)) from None
