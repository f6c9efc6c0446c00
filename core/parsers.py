"""The one JSON parser of the API: whatever the bytes, a body is either usable data or a 400 ``malformed_json``.

DRF's ``JSONParser`` turns only ``ValueError`` into a 400: a body nested ~900 deep raised ``RecursionError``
(a 500; one 500 deep did too, later, in code that recurses), ``1e999`` parsed to infinity, and a lone
surrogate (``"\\ud800"``) parsed to a string that no database, cache key or renderer can encode, and a
``charset`` that is no encoding was ignored. All are refused here, at the edge.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from typing import IO, Any

from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding  # type: ignore[attr-defined]  # DRF 3.18's, not in its stubs
from rest_framework.utils.json import strict_constant

from core.errors import DomainError

# Far deeper than any valid request (filters nest at most 5 levels); deeper bodies only cost stack and CPU.
MAX_JSON_DEPTH = 32
TOO_DEEP = f"the document is nested deeper than {MAX_JSON_DEPTH} levels"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def refusal(data: object) -> str | None:
    """Why ``data`` is unusable (nested deeper than ``MAX_JSON_DEPTH``, a string that is not valid Unicode), or
    None; walked without recursion, so the check itself cannot overflow the stack."""
    pending: list[tuple[object, int]] = [(data, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return TOO_DEEP
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a string contains a lone surrogate (e.g. \\ud800), not valid Unicode"
    return None


class UnsupportedCharset(DomainError):
    """400: the body's declared charset is no encoding (Django ignored it and read UTF-8)."""

    code = "unsupported_charset"


def _charset_of(media_type: str | None) -> str | None:
    if not media_type:
        return None
    _, params = parse_header_parameters(media_type)
    return params.get("charset")


class StrictJSONParser(JSONParser):
    """``JSONParser`` that refuses too-deep nesting, non-finite numbers and lone surrogates with a 400."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:  # any JSON value, not only an object
        charset = _charset_of(media_type)
        if charset is not None:
            try:
                known = codecs.lookup(charset)._is_text_encoding  # rot13 is a codec, but not a text encoding
            except LookupError:
                known = False
            if not known:
                raise UnsupportedCharset(
                    f"Content-Type names charset {charset[:40]!r}, which is no known encoding: send UTF-8",
                    details={"charset": charset[:40]},
                )
        reader = codecs.getreader(get_encoding(parser_context or {}))
        try:
            data = json.load(reader(stream), parse_constant=strict_constant, parse_float=_finite_float)
        except RecursionError:
            raise ParseError(f"JSON parse error - {TOO_DEEP}") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        reason = refusal(data)
        if reason is not None:
            raise ParseError(f"JSON parse error - {reason}")
        return data
