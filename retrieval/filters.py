"""The search filter language, compiled to ORM expressions (so to parameterized SQL).

A filter is a JSON object; its entries are ANDed::

    {"doc_type": {"in": ["pdf", "docx"]},          # business field with operators
     "created_at": {"gte": "2026-01-01"},         # ISO date or datetime (UTC when naive)
     "metadata.shop_id": 101,                     # bare value means equality
     "tags": "policy",                            # tag membership
     "or": [{"metadata.lang": "zh"}, {"tags": {"any": ["faq"]}}],
     "not": {"doc_type": "faq"}}

Fields and their operators:

=============== ===================================================== ===========================
field           operators                                             value
=============== ===================================================== ===========================
doc_type        eq, ne, in, nin                                       string
doc_id          eq, ne, in, nin                                       integer
created_at      eq, gt, gte, lt, lte                                  ISO date / datetime string
tags            contains (bare string), any, all                      string / list of strings
metadata.<key>  eq, ne, in, nin, gt, gte, lt, lte, exists,            JSON scalar (exists: bool;
                contains, starts_with, ends_with                      the last three: string)
=============== ===================================================== ===========================

``metadata.a.b`` reaches nested keys. Metadata equality uses JSON containment (GIN-indexed), so it
also matches a list that contains the value. ``ne``/``nin`` match rows that lack the key. Range
operators compare JSON values of the same type (numbers numerically, strings lexically).
``contains`` / ``starts_with`` / ``ends_with`` match string values by substring, prefix or suffix
(case-sensitive, ``%`` and ``_`` are literal); ``contains`` also matches a list holding the string.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import DEFAULT_DB_ALIAS
from django.db.models import (
    BooleanField,
    CharField,
    ExpressionWrapper,
    F,
    Field,
    Func,
    JSONField,
    Q,
    QuerySet,
    TextField,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from engines.base import SqlFilter
from knowledge.models import Chunk
from retrieval.errors import InvalidFilter

MAX_DEPTH = 5
MAX_CLAUSES = 64
MAX_LIST_ITEMS = 100
MAX_STRING = 500
_METADATA_KEY = re.compile(r"^[^.\s\x00]{1,64}$")
_LOGICAL = ("and", "or", "not")

_SCALAR_OPS = {"eq", "ne", "in", "nin"}
_FIELDS: dict[str, set[str]] = {
    "doc_type": _SCALAR_OPS,
    "doc_id": _SCALAR_OPS,
    "created_at": {"eq", "gt", "gte", "lt", "lte"},
    "tags": {"contains", "any", "all"},
}
_STRING_MATCH_LOOKUPS = {"contains": "contains", "starts_with": "startswith", "ends_with": "endswith"}
_METADATA_OPS = _SCALAR_OPS | {"gt", "gte", "lt", "lte", "exists"} | _STRING_MATCH_LOOKUPS.keys()
_COLUMNS = {"doc_type": "doc_type", "doc_id": "document_id", "created_at": "created_at"}


@dataclass
class CompiledFilter:
    """``queryset.alias(**aliases).filter(q)`` applies it to chunks; :meth:`sql` gives the same
    condition as parameterized SQL for the vector engine; ``source`` is the filter object it was
    compiled from (valid), which ``retrieval.keyword_filter`` turns into the keyword index's filter."""

    q: Q = field(default_factory=Q)
    aliases: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] | None = None
    reader: tuple[str, ...] | None = None  # the principals whose ACL check ``q`` holds (:meth:`for_reader`)

    def for_reader(self, reader: tuple[str, ...]) -> CompiledFilter:
        """This filter ANDed with a reader's ACL check: a chunk whose ACL shares one of the reader's
        principals (``acl && reader``, GIN-indexed; docs/permissions.md). It is part of ``q``, so every
        stage that applies the filter (the SQL pre-filter, the checks of the index's and graph's hits)
        applies it; ``source`` stays the caller's filter (the keyword index's part of it)."""
        if not reader:
            raise ValueError("a reader holds at least '*'")  # an empty overlap would match nothing, silently
        return CompiledFilter(
            q=self.q & Q(acl__overlap=list(reader)), aliases=self.aliases, source=self.source, reader=reader
        )

    def apply(self, queryset: QuerySet[Chunk]) -> QuerySet[Chunk]:
        return queryset.alias(**self.aliases).filter(self.q) if self.aliases else queryset.filter(self.q)

    @cached_property
    def sql(self) -> SqlFilter:
        """The WHERE condition Django compiles for the chunk table (columns qualified by its name)."""
        if not self.q:
            return SqlFilter()
        query = self.apply(Chunk.objects.all()).query
        compiler = query.get_compiler(using=DEFAULT_DB_ALIAS)
        compiler.pre_sql_setup()
        where, params = compiler.compile(query.where)
        return SqlFilter(where, tuple(params), self.reader or ())


def compile_filters(filters: Any, reader: tuple[str, ...] | None = None) -> CompiledFilter:
    """``filters`` compiled; with a ``reader``, ANDed with its ACL check (:meth:`CompiledFilter.for_reader`)."""
    if filters is None:
        compiled = CompiledFilter()
    else:
        compiler = _Compiler()
        q = compiler.compile_object(filters, path="filters", depth=0)
        compiled = CompiledFilter(q=q, aliases=compiler.aliases, source=filters)
    return compiled if reader is None else compiled.for_reader(reader)


class _Compiler:
    def __init__(self) -> None:
        self.aliases: dict[str, Any] = {}
        self._clauses = 0
        self._alias_ids = itertools.count()

    def compile_object(self, filters: Any, *, path: str, depth: int) -> Q:
        if not isinstance(filters, dict):
            raise InvalidFilter(f"{path}: expected a JSON object, got {_json_type(filters)}")
        if depth > MAX_DEPTH:
            raise InvalidFilter(f"{path}: nested deeper than {MAX_DEPTH} levels")
        q = Q()
        for key, value in filters.items():
            self._clauses += 1
            if self._clauses > MAX_CLAUSES:
                raise InvalidFilter(f"filters: more than {MAX_CLAUSES} clauses")
            q &= self._compile_entry(key, value, path=path, depth=depth)
        return q

    def _compile_entry(self, key: str, value: Any, *, path: str, depth: int) -> Q:
        if key in ("and", "or"):
            if not isinstance(value, list) or not value:
                raise InvalidFilter(f"{path}.{key}: expected a non-empty list of filter objects")
            parts = [
                self.compile_object(item, path=f"{path}.{key}[{i}]", depth=depth + 1) for i, item in enumerate(value)
            ]
            combined = parts[0]
            for part in parts[1:]:
                combined = combined & part if key == "and" else combined | part
            return combined
        if key == "not":
            return ~self.compile_object(value, path=f"{path}.not", depth=depth + 1)
        if key.startswith("metadata."):
            return self._metadata(key, value, path=f"{path}.{key}")
        if key not in _FIELDS:
            known = ", ".join([*_FIELDS, "metadata.<key>", *_LOGICAL])
            raise InvalidFilter(f"{path}: unknown field {key!r} (known: {known})", details={"field": key})
        operations = self._operations(
            key, value, _FIELDS[key], path=f"{path}.{key}", bare_op="contains" if key == "tags" else "eq"
        )
        q = Q()
        for op, operand in operations:
            q &= self._field(key, op, operand, path=f"{path}.{key}.{op}")
        return q

    @staticmethod
    def _operations(name: str, value: Any, allowed: set[str], *, path: str, bare_op: str) -> list[tuple[str, Any]]:
        if not isinstance(value, dict):
            return [(bare_op, value)]
        if not value:
            raise InvalidFilter(f"{path}: empty operator object")
        for op in value:
            if op not in allowed:
                raise InvalidFilter(
                    f"{path}: unknown operator {op!r} for {name!r} (allowed: {', '.join(sorted(allowed))})",
                    details={"field": name, "operator": op},
                )
        return list(value.items())

    def _field(self, name: str, op: str, operand: Any, *, path: str) -> Q:
        if name == "tags":
            if op == "contains":
                return Q(tags__contains=[_string(operand, path)])
            tags = [_string(item, path) for item in _list(operand, path)]
            return Q(tags__overlap=tags) if op == "any" else Q(tags__contains=tags)
        column = _COLUMNS[name]
        convert = {"doc_type": _string, "doc_id": _integer, "created_at": _timestamp}[name]
        if op in ("in", "nin"):
            values = [convert(item, path) for item in _list(operand, path)]
            q = Q(**{f"{column}__in": values})
            return ~q if op == "nin" else q
        converted = convert(operand, path)
        if op == "ne":
            return ~Q(**{column: converted})
        lookup = column if op == "eq" else f"{column}__{op}"
        return Q(**{lookup: converted})

    def _metadata(self, key: str, value: Any, *, path: str) -> Q:
        segments = key.split(".")[1:]
        if not segments or len(segments) > MAX_DEPTH or not all(_METADATA_KEY.match(s) for s in segments):
            raise InvalidFilter(f"{path}: invalid metadata key (dot-separated names of 1-64 characters)")
        q = Q()
        for op, operand in self._operations(key, value, _METADATA_OPS, path=path, bare_op="eq"):
            q &= self._metadata_op(segments, op, operand, path=f"{path}.{op}")
        return q

    def _metadata_op(self, segments: list[str], op: str, operand: Any, *, path: str) -> Q:
        if op in ("eq", "ne", "in", "nin"):
            values = (
                [_scalar(item, path) for item in _list(operand, path)]
                if op in ("in", "nin")
                else [_scalar(operand, path)]
            )
            q = Q()
            for item in values:
                # Containment (GIN-indexed): the value itself, or a list holding it.
                q |= Q(metadata__contains=_nest(segments, item))
                if item is not None:
                    q |= Q(metadata__contains=_nest(segments, [item]))
            return ~q if op in ("ne", "nin") else q
        alias = f"_filter_metadata_{next(self._alias_ids)}"
        value = _metadata_path(segments, "#>", JSONField())
        if op in _STRING_MATCH_LOOKUPS:
            return self._metadata_string_match(segments, alias, value, op, _string(operand, path))
        if op == "exists":
            self.aliases[alias] = value
            return Q(**{f"{alias}__isnull": not _boolean(operand, path)})
        if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
            raise InvalidFilter(f"{path}: expected a number or string, got {_json_type(operand)}")
        # jsonb orders values of different types too (every string < every number): compare like with
        # like. Coalesce makes a missing key false rather than NULL, so `not` is the exact complement.
        json_type = "string" if isinstance(operand, str) else "number"
        condition = Q(**{f"{alias}_value__{op}": _scalar(operand, path), f"{alias}_type": json_type})
        self.aliases[f"{alias}_value"] = value
        self.aliases[f"{alias}_type"] = Func(value, function="jsonb_typeof", output_field=CharField())
        self.aliases[alias] = Coalesce(ExpressionWrapper(condition, output_field=BooleanField()), Value(False))
        return Q(**{alias: True})

    def _metadata_string_match(self, segments: list[str], alias: str, value: Any, op: str, operand: str) -> Q:
        """Substring / prefix / suffix of a string value (Django's LIKE lookups escape ``%`` and ``_``).
        Coalesce makes a missing key or another type false rather than NULL, so ``not`` is the exact complement."""
        condition = Q(**{f"{alias}_text__{_STRING_MATCH_LOOKUPS[op]}": operand, f"{alias}_type": "string"})
        self.aliases[f"{alias}_text"] = _metadata_path(segments, "#>>", TextField())
        self.aliases[f"{alias}_type"] = Func(value, function="jsonb_typeof", output_field=CharField())
        self.aliases[alias] = Coalesce(ExpressionWrapper(condition, output_field=BooleanField()), Value(False))
        matched = Q(**{alias: True})
        if op == "contains":  # a list holding the string (containment, GIN-indexed)
            matched |= Q(metadata__contains=_nest(segments, [operand]))
        return matched


def _metadata_path(segments: list[str], operator: str, output_field: Field[Any, Any]) -> Func:
    """``metadata #> '{a,b}'`` (JSON) or ``#>>`` (text): reads object keys even when they look like numbers
    (``->`` would index arrays)."""
    return Func(
        F("metadata"),
        Value(segments, output_field=ArrayField(TextField())),
        template="(%(expressions)s)",
        arg_joiner=f" {operator} ",
        output_field=output_field,
    )


def _nest(segments: list[str], value: Any) -> dict[str, Any]:
    nested: Any = value
    for segment in reversed(segments):
        nested = {segment: nested}
    return dict(nested)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise InvalidFilter(f"{path}: expected a non-empty list")
    if len(value) > MAX_LIST_ITEMS:
        raise InvalidFilter(f"{path}: more than {MAX_LIST_ITEMS} values")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidFilter(f"{path}: expected a string, got {_json_type(value)}")
    if len(value) > MAX_STRING:
        raise InvalidFilter(f"{path}: string longer than {MAX_STRING} characters")
    if "\x00" in value:
        raise InvalidFilter(f"{path}: strings may not contain NUL characters")
    return value


def _integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidFilter(f"{path}: expected an integer, got {_json_type(value)}")
    if not -(2**63) <= value < 2**63:
        raise InvalidFilter(f"{path}: integer out of range")
    return value


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidFilter(f"{path}: expected true or false, got {_json_type(value)}")
    return value


def _scalar(value: Any, path: str) -> Any:
    if isinstance(value, str):
        return _string(value, path)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidFilter(f"{path}: number out of range")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise InvalidFilter(f"{path}: expected a string, number, boolean or null, got {_json_type(value)}")


def _timestamp(value: Any, path: str) -> dt.datetime:
    text = _string(value, path)
    try:
        moment = parse_datetime(text)
        if moment is None:
            day = parse_date(text)
            moment = dt.datetime.combine(day, dt.time.min) if day else None
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidFilter(f"{path}: {text!r} is not an ISO date or datetime")
    if timezone.is_naive(moment):
        return timezone.make_aware(moment, dt.UTC)
    # As UTC: PostgreSQL refuses offsets beyond +-15:59, and the instant must fall within years 1-9999.
    try:
        return moment.astimezone(dt.UTC)
    except OverflowError:
        raise InvalidFilter(f"{path}: {text!r} is outside the years 1-9999 in UTC") from None
