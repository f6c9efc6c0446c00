"""Business-field filters a keyword index applies itself, so a filtered BM25 search costs about what
an unfiltered one does (issue 27; docs/benchmarks/decisions.md, "The filtered BM25 leg").

A chunk's filterable fields travel with its index entry (:class:`FilterFields`): its doc type, tags and
scalar metadata values as exact terms, and its creation time. A filter arrives as a small tree
(:data:`LexicalFilter`) the domain builds from its filter language; each engine turns it into its own
query (tantivy: ``raw`` terms and a fast-field range under a zero-weight const-score clause;
Elasticsearch: ``keyword`` terms and a range in the bool query's filter context).

Metadata terms follow PostgreSQL's JSON containment, which is what the SQL filter uses: an equality
on ``metadata.a.b`` matches the value at that path or a list there that holds it. Each value's term
is ``meta:<path>=<JSON>``, numbers written as PostgreSQL compares them (``1.0`` as ``1``). Keys a
filter cannot name (a dot, white space, NUL, over 64 characters, deeper than five levels) and strings
longer than a filter may give are left out: no filter can ask for them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import Any

# What an index's entries carry, recorded in its state: 1, the business fields; 2, their ACL terms too
# (an index built before holds none: searches check its hits' ACL against the rows only).
FILTER_FIELDS_LEVEL = 2
MAX_PATH_DEPTH = 5
MAX_KEY = 64
MAX_STRING = 500
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class FilterFields:
    """A chunk's filterable fields as a keyword index stores them: exact terms and the creation time."""

    terms: tuple[str, ...]
    created_at_us: int


@dataclass(frozen=True)
class Terms:
    """Entries holding any of these terms (none: no entry)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class DocIds:
    """Entries of any of these documents (none: no entry)."""

    ids: tuple[int, ...]


@dataclass(frozen=True)
class CreatedRange:
    """Entries created within a range of microseconds since the epoch (None: unbounded)."""

    lower_us: int | None
    upper_us: int | None
    include_lower: bool = True
    include_upper: bool = True


@dataclass(frozen=True)
class And:
    parts: tuple[LexicalFilter, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[LexicalFilter, ...]


@dataclass(frozen=True)
class Not:
    part: LexicalFilter


LexicalFilter = Terms | DocIds | CreatedRange | And | Or | Not


def doc_type_term(value: str) -> str:
    return f"doc_type={value}"


def tag_term(value: str) -> str:
    return f"tag={value}"


def acl_term(principal: str) -> str:
    """The term of one principal of a chunk's ACL (who may read it; docs/permissions.md)."""
    return f"acl={principal}"


def metadata_term(path: list[str], value: Any) -> str:
    """The term of one scalar ``value`` at a metadata ``path``."""
    return f"meta:{'.'.join(path)}={_json_scalar(value)}"


def microseconds(moment: dt.datetime) -> int:
    """A timezone-aware instant as whole microseconds since the epoch."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def filter_fields(
    doc_type: str, created_at: dt.datetime, tags: list[str], metadata: Any, acl: list[str] | None = None
) -> FilterFields:
    """The filterable fields of one chunk (``acl``: its principals, as ``acl=<principal>`` terms)."""
    terms = [doc_type_term(doc_type), *(tag_term(tag) for tag in tags), *(acl_term(p) for p in acl or ())]
    if isinstance(metadata, dict):
        _metadata_terms(metadata, [], terms)
    return FilterFields(tuple(dict.fromkeys(terms)), microseconds(created_at))


def _metadata_terms(node: dict[str, Any], path: list[str], out: list[str]) -> None:
    for key, value in node.items():
        if not _nameable(key) or len(path) >= MAX_PATH_DEPTH:
            continue
        here = [*path, key]
        if isinstance(value, dict):
            _metadata_terms(value, here, out)
        elif isinstance(value, list):  # containment: a list matches each scalar it holds (not null)
            out += [metadata_term(here, item) for item in value if _filterable_scalar(item) and item is not None]
        elif _filterable_scalar(value):
            out.append(metadata_term(here, value))


def _nameable(key: str) -> bool:
    return 0 < len(key) <= MAX_KEY and not any(c == "." or c == "\x00" or c.isspace() for c in key)


def _filterable_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_STRING and "\x00" not in value
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int))


def _json_scalar(value: Any) -> str:
    """JSON of a scalar, numbers as PostgreSQL's ``numeric`` equality sees them (``2.0`` equals ``2``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, ensure_ascii=False)
