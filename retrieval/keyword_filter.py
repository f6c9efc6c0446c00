"""The search filter language (``retrieval.filters``) as the keyword index's own filter
(``engines.lexical_filter``), so the BM25 leg filters inside the index instead of reading the
matching chunk ids from PostgreSQL (issue 27).

Every field but a few metadata operators translates exactly: ``doc_type``, ``doc_id``, ``created_at``,
``tags`` and metadata ``eq`` / ``ne`` / ``in`` / ``nin``, under ``and`` / ``or`` / ``not``. Metadata
ranges, ``exists`` and the string matches do not; a part that does not translate leaves a wider
filter (inside ``and``) or none (inside ``or``, or under ``not``, where a wider filter would be a
narrower one). The leg checks the index's hits against SQL either way, so a wider filter costs depth,
never a wrong hit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engines import lexical_filter as lf
from retrieval.filters import CompiledFilter, _integer, _list, _scalar, _string, _timestamp

_SCALAR_FIELDS = ("doc_type", "doc_id")


@dataclass(frozen=True)
class _Translated:
    node: lf.LexicalFilter | None  # None: no restriction
    exact: bool


_EVERYTHING = _Translated(None, False)


def keyword_filter(compiled: CompiledFilter, *, acl_terms: bool = False) -> lf.LexicalFilter | None:
    """The keyword index's filter for a compiled filter: exact or wider than it; None when nothing of
    it translates (or there is no filter). ``acl_terms``: the index's entries carry their ACL terms, so
    a reader's check translates exactly (any of its principals' terms; docs/permissions.md)."""
    node = _object(compiled.source).node if compiled.source else None
    if compiled.reader is not None and acl_terms:
        acl = lf.Terms(tuple(lf.acl_term(principal) for principal in compiled.reader))
        node = acl if node is None else lf.And((node, acl))
    return node


def exact_field_filter(compiled: CompiledFilter) -> lf.LexicalFilter | None:
    """The filter (with its reader's ACL check) as a tree that selects exactly the rows the SQL filter
    does, for an index that filters itself without a check against SQL after (the vector index outside
    the database); None when there is no filter or it does not translate exactly (metadata ranges,
    ``exists`` and string matches). A filter that translates to no restriction is an empty ``And``."""
    if not compiled.q:
        return None
    translated = _object(compiled.source) if compiled.source else _Translated(None, True)
    if not translated.exact:
        return None
    parts = [] if translated.node is None else [translated.node]
    if compiled.reader is not None:
        parts.append(lf.Terms(tuple(lf.acl_term(principal) for principal in compiled.reader)))
    return parts[0] if len(parts) == 1 else lf.And(tuple(parts))


def _object(filters: dict[str, Any]) -> _Translated:
    return _all([_entry(key, value) for key, value in filters.items()])


def _all(parts: list[_Translated]) -> _Translated:
    nodes = [part.node for part in parts if part.node is not None]
    exact = all(part.exact for part in parts)
    if not nodes:
        return _EVERYTHING
    return _Translated(nodes[0] if len(nodes) == 1 else lf.And(tuple(nodes)), exact)


def _any(parts: list[_Translated]) -> _Translated:
    if any(part.node is None for part in parts):
        return _EVERYTHING
    nodes = tuple(part.node for part in parts if part.node is not None)
    return _Translated(nodes[0] if len(nodes) == 1 else lf.Or(nodes), all(part.exact for part in parts))


def _negated(part: _Translated) -> _Translated:
    return _Translated(lf.Not(part.node), True) if part.exact and part.node is not None else _EVERYTHING


def _entry(key: str, value: Any) -> _Translated:
    if key == "and":
        return _all([_object(item) for item in value])
    if key == "or":
        return _any([_object(item) for item in value])
    if key == "not":
        return _negated(_object(value))
    bare = "contains" if key == "tags" else "eq"
    operations = list(value.items()) if isinstance(value, dict) else [(bare, value)]
    if key.startswith("metadata."):
        segments = key.split(".")[1:]
        return _all([_metadata(segments, op, operand) for op, operand in operations])
    return _all([_field(key, op, operand) for op, operand in operations])


def _exact(node: lf.LexicalFilter) -> _Translated:
    return _Translated(node, True)


def _field(name: str, op: str, operand: Any) -> _Translated:
    if name == "tags":
        if op == "contains":
            return _exact(lf.Terms((lf.tag_term(_string(operand, name)),)))
        tags = [lf.tag_term(_string(item, name)) for item in _list(operand, name)]
        return _exact(lf.Terms(tuple(tags)) if op == "any" else lf.And(tuple(lf.Terms((tag,)) for tag in tags)))
    if name == "created_at":
        moment = lf.microseconds(_timestamp(operand, name))
        bounds = {
            "eq": (moment, moment, True, True),
            "gt": (moment, None, False, True),
            "gte": (moment, None, True, True),
            "lt": (None, moment, True, False),
            "lte": (None, moment, True, True),
        }
        return _exact(lf.CreatedRange(*bounds[op]))
    values = _list(operand, name) if op in ("in", "nin") else [operand]
    node: lf.LexicalFilter
    if name == "doc_type":
        node = lf.Terms(tuple(lf.doc_type_term(_string(item, name)) for item in values))
    else:  # doc_id: ids are positive, so a negative one matches no document
        node = lf.DocIds(tuple(i for i in (_integer(item, name) for item in values) if i > 0))
    return _exact(lf.Not(node) if op in ("ne", "nin") else node)


def _metadata(segments: list[str], op: str, operand: Any) -> _Translated:
    if op not in ("eq", "ne", "in", "nin"):
        return _EVERYTHING  # ranges, exists and string matches: SQL decides
    values = _list(operand, "metadata") if op in ("in", "nin") else [operand]
    node = lf.Terms(tuple(lf.metadata_term(segments, _scalar(item, "metadata")) for item in values))
    return _exact(lf.Not(node) if op in ("ne", "nin") else node)
