"""The filter language (``retrieval.filters``) against real rows in PostgreSQL.

Every case states its expectation as a Python predicate over the rows' *specifications* (the values
the fixture wrote), so the expected id sets are computed independently of the SQL the compiler makes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection

from knowledge.models import Chunk
from retrieval.errors import InvalidFilter
from retrieval.filters import MAX_CLAUSES, MAX_DEPTH, MAX_LIST_ITEMS, MAX_STRING, compile_filters
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory

UTC = dt.UTC
MISSING = object()


def at(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


@dataclass
class Row:
    name: str
    doc: str  # key of the document (its doc_type is the same string)
    created_at: dt.datetime
    tags: list[str]
    metadata: dict = field(default_factory=dict)

    @property
    def doc_type(self) -> str:
        return self.doc

    def meta(self, path: str) -> Any:
        """The metadata value at a dotted path, or MISSING."""
        value: Any = self.metadata
        for segment in path.split("."):
            if not isinstance(value, dict) or segment not in value:
                return MISSING
            value = value[segment]
        return value


# --- independent JSON semantics ------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def json_eq(stored: Any, wanted: Any) -> bool:
    """JSON equality: true is not 1, "7" is not 7, 1 equals 1.0."""
    if stored is MISSING:
        return False
    if wanted is None:
        return stored is None
    if isinstance(wanted, bool):
        return isinstance(stored, bool) and stored is wanted
    if _is_number(wanted):
        return _is_number(stored) and stored == wanted
    return isinstance(stored, str) and stored == wanted


def json_cmp(stored: Any, op: str, wanted: Any) -> bool:
    """Range comparison between JSON values of the same type only."""
    same_type = (_is_number(stored) and _is_number(wanted)) or (isinstance(stored, str) and isinstance(wanted, str))
    if not same_type:
        return False
    return {"gt": stored > wanted, "gte": stored >= wanted, "lt": stored < wanted, "lte": stored <= wanted}[op]


def m_eq(path, value):
    return lambda r: json_eq(r.meta(path), value)


def m_cmp(path, op, value):
    return lambda r: json_cmp(r.meta(path), op, value)


def m_any(path, values):
    return lambda r: any(json_eq(r.meta(path), v) for v in values)


def m_text(path, test):
    """A string match: only string values are matched (numbers, lists and missing keys are not)."""
    return lambda r: isinstance(r.meta(path), str) and test(r.meta(path))


def m_exists(path):
    return lambda r: r.meta(path) is not MISSING


def _case_id(case) -> str:
    return repr(case.values[0] if hasattr(case, "values") else case[0])


# --- the rows ------------------------------------------------------------------------------------

DOC_TYPES = ("pdf", "docx", "txt", "md")

ROWS = [
    Row(
        "r0",
        "pdf",
        at(2025, 12, 31, 23, 59, 59),
        ["policy", "faq"],
        {"shop_id": 7, "lang": "zh", "price": 5, "name": "apple", "a": {"b": 1}, "contains": "yes"},
    ),
    Row(
        "r1",
        "pdf",
        at(2026, 1, 1, 0, 0, 0),
        ["policy"],
        {"shop_id": 8, "lang": "en", "price": 10.5, "name": "banana", "flag": True, "a": {"b": 2}, "in": 3},
    ),
    Row(
        "r2",
        "docx",
        at(2026, 1, 1, 12, 0, 0),
        ["faq"],
        {"shop_id": "7", "price": 0, "name": "cherry", "flag": False, "a": {"b": "x"}, "exact": None},
    ),
    Row(
        "r3",
        "docx",
        at(2026, 1, 2, 0, 0, 0),
        [],
        {"shop_id": None, "price": -3, "name": "date", "a": 5, "contains": "no", "code": "10"},
    ),
    Row(
        "r4",
        "txt",
        at(2026, 2, 15, 8, 30, 0),
        ["faq", "howto", "policy"],
        {"lang": "zh", "price": 100, "name": "elder", "a": {"c": 1}, "in": 4, "code": "9"},
    ),
    Row(
        "r5",
        "txt",
        at(2025, 6, 1, 0, 0, 0),
        ["howto"],
        {"shop_id": 7, "flag": True, "a": {"b": {"c": "deep"}}, "exact": 1, "code": "100"},
    ),
    Row("r6", "md", at(2026, 1, 1, 0, 0, 0), ["release-notes"], {}),
    Row("r8", "md", at(2026, 4, 1, 0, 0, 0), [], {"name": "50%_grape", "labels": ["red", "blue"]}),
    Row(
        "r7",
        "md",
        at(2027, 3, 3, 3, 3, 3),
        ["faq", "howto"],
        {"shop_id": 9, "lang": "fr", "price": 5.0, "name": "fig", "flag": False, "isnull": True, "gt": 2},
    ),
]


@dataclass
class Dataset:
    ids: dict[str, int]
    docs: dict[str, Any]
    base: Any  # queryset of this fixture's chunks only

    def select(self, filters: Any) -> set[int]:
        return set(compile_filters(filters).apply(self.base).values_list("id", flat=True))

    def expect(self, predicate: Callable[[Row], bool]) -> set[int]:
        return {self.ids[row.name] for row in ROWS if predicate(row)}

    def doc_id(self, row: Row) -> int:
        return self.docs[row.doc].pk


@pytest.fixture
def data(db) -> Dataset:
    # Every KB first: creating one runs CREATE INDEX, refused once chunk inserts have pending FK triggers.
    kb, other_kb = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    docs = {doc_type: DocumentFactory(knowledge_base=kb, doc_type=doc_type) for doc_type in DOC_TYPES}
    chunks = [
        ChunkFactory.build(
            document=docs[row.doc],
            doc_type=row.doc_type,
            created_at=row.created_at,
            tags=row.tags,
            metadata=row.metadata,
        )
        for row in ROWS
    ]
    Chunk.objects.bulk_create(chunks)
    # Noise outside the queried scope (another KB and tenant) that matches many filters: never counted.
    other = ChunkFactory(
        document__knowledge_base=other_kb,
        doc_type="pdf",
        tags=["faq"],
        metadata={"shop_id": 7},
        created_at=at(2026, 1, 1),
    )
    assert other.kb_version_id != kb.active_version_id
    base = Chunk.objects.filter(kb_version=kb.active_version)
    return Dataset(ids={row.name: chunk.pk for row, chunk in zip(ROWS, chunks)}, docs=docs, base=base)


def assert_selects(data: Dataset, filters: Any, predicate: Callable[[Row], bool], *, allow_empty: bool = False):
    expected = data.expect(predicate)
    everything = data.expect(lambda r: True)
    # Each case must discriminate: it selects some rows and leaves others out.
    assert expected != everything, "test case does not discriminate"
    if not allow_empty:
        assert expected, "test case selects nothing"
    assert data.select(filters) == expected


# --- business fields -----------------------------------------------------------------------------

BUSINESS_CASES = [
    ({"doc_type": "pdf"}, lambda r: r.doc_type == "pdf"),
    ({"doc_type": {"eq": "docx"}}, lambda r: r.doc_type == "docx"),
    ({"doc_type": {"ne": "pdf"}}, lambda r: r.doc_type != "pdf"),
    ({"doc_type": {"in": ["pdf", "md"]}}, lambda r: r.doc_type in ("pdf", "md")),
    ({"doc_type": {"nin": ["pdf", "md"]}}, lambda r: r.doc_type not in ("pdf", "md")),
    ({"doc_type": {"in": ["nothing-like-this"]}}, lambda r: False),
    ({"tags": "policy"}, lambda r: "policy" in r.tags),
    ({"tags": {"contains": "howto"}}, lambda r: "howto" in r.tags),
    ({"tags": {"any": ["howto", "release-notes"]}}, lambda r: bool({"howto", "release-notes"} & set(r.tags))),
    ({"tags": {"all": ["faq", "howto"]}}, lambda r: {"faq", "howto"} <= set(r.tags)),
    ({"tags": {"all": ["faq"]}}, lambda r: "faq" in r.tags),
    ({"tags": "polic"}, lambda r: False),  # membership, not substring
    ({"doc_type": {"in": ["pdf", "txt"], "ne": "txt"}}, lambda r: r.doc_type == "pdf"),  # operators are ANDed
]


@pytest.mark.parametrize(("filters", "predicate"), BUSINESS_CASES, ids=[repr(c[0]) for c in BUSINESS_CASES])
def test_business_field_operators(data, filters, predicate):
    assert_selects(data, filters, predicate, allow_empty=True)


def test_doc_id_operators(data):
    pdf, md = data.docs["pdf"].pk, data.docs["md"].pk
    assert_selects(data, {"doc_id": pdf}, lambda r: data.doc_id(r) == pdf)
    assert_selects(data, {"doc_id": {"eq": md}}, lambda r: data.doc_id(r) == md)
    assert_selects(data, {"doc_id": {"ne": pdf}}, lambda r: data.doc_id(r) != pdf)
    assert_selects(data, {"doc_id": {"in": [pdf, md]}}, lambda r: data.doc_id(r) in (pdf, md))
    assert_selects(data, {"doc_id": {"nin": [pdf, md]}}, lambda r: data.doc_id(r) not in (pdf, md))
    missing = max(d.pk for d in data.docs.values()) + 1000
    assert_selects(data, {"doc_id": missing}, lambda r: False, allow_empty=True)


# created_at: each operator with a date (midnight UTC), a naive datetime (UTC) and an aware datetime.
MOMENTS = [
    ("2026-01-01", at(2026, 1, 1)),
    ("2026-01-01T00:00:00", at(2026, 1, 1)),
    ("2026-01-01T12:00:00", at(2026, 1, 1, 12)),
    ("2026-01-01T14:00:00+02:00", at(2026, 1, 1, 12)),
    ("2026-01-01T00:00:00Z", at(2026, 1, 1)),
    ("2025-12-31T23:59:59", at(2025, 12, 31, 23, 59, 59)),
    ("2026-01-02T11:59:00+23:59", at(2026, 1, 1, 12)),  # beyond PostgreSQL's +-15:59 offsets: sent as UTC
]
COMPARE = {
    "eq": lambda a, b: a == b,
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
}


@pytest.mark.parametrize("op", sorted(COMPARE))
@pytest.mark.parametrize(("text", "moment"), MOMENTS, ids=[m[0] for m in MOMENTS])
def test_created_at_operators(data, op, text, moment):
    assert_selects(data, {"created_at": {op: text}}, lambda r: COMPARE[op](r.created_at, moment))


def test_created_at_bare_value_is_equality_and_ranges_combine(data):
    assert_selects(data, {"created_at": "2026-01-01"}, lambda r: r.created_at == at(2026, 1, 1))
    assert_selects(
        data,
        {"created_at": {"gte": "2026-01-01", "lt": "2026-01-02"}},
        lambda r: at(2026, 1, 1) <= r.created_at < at(2026, 1, 2),
    )


# --- metadata ------------------------------------------------------------------------------------

METADATA_CASES = [
    # equality, bare and explicit, per JSON type
    ({"metadata.shop_id": 7}, m_eq("shop_id", 7)),
    ({"metadata.shop_id": {"eq": 7}}, m_eq("shop_id", 7)),
    ({"metadata.shop_id": "7"}, m_eq("shop_id", "7")),
    ({"metadata.shop_id": None}, m_eq("shop_id", None)),
    ({"metadata.shop_id": {"eq": None}}, m_eq("shop_id", None)),
    ({"metadata.flag": True}, m_eq("flag", True)),
    ({"metadata.flag": False}, m_eq("flag", False)),
    ({"metadata.price": 5}, m_eq("price", 5)),  # 5 == 5.0 in JSON
    ({"metadata.price": 10.5}, m_eq("price", 10.5)),
    ({"metadata.price": 1}, m_eq("price", 1)),  # no row; true is not 1
    ({"metadata.lang": "zh"}, m_eq("lang", "zh")),
    # ne / nin also match rows that lack the key
    ({"metadata.shop_id": {"ne": 7}}, lambda r: not json_eq(r.meta("shop_id"), 7)),
    ({"metadata.shop_id": {"ne": None}}, lambda r: not json_eq(r.meta("shop_id"), None)),
    ({"metadata.flag": {"ne": True}}, lambda r: not json_eq(r.meta("flag"), True)),
    ({"metadata.shop_id": {"in": [7, 8]}}, lambda r: any(json_eq(r.meta("shop_id"), v) for v in (7, 8))),
    ({"metadata.shop_id": {"in": [7, "7", None]}}, m_any("shop_id", (7, "7", None))),
    ({"metadata.lang": {"in": ["zh", "fr"]}}, lambda r: r.meta("lang") in ("zh", "fr")),
    ({"metadata.shop_id": {"nin": [7, 8]}}, lambda r: not any(json_eq(r.meta("shop_id"), v) for v in (7, 8))),
    ({"metadata.lang": {"nin": ["zh"]}}, lambda r: not json_eq(r.meta("lang"), "zh")),
    # ranges on numbers (ints and floats compare numerically)
    ({"metadata.price": {"gt": 5}}, m_cmp("price", "gt", 5)),
    ({"metadata.price": {"gte": 5}}, m_cmp("price", "gte", 5)),
    ({"metadata.price": {"lt": 5}}, m_cmp("price", "lt", 5)),
    ({"metadata.price": {"lte": 5}}, m_cmp("price", "lte", 5)),
    ({"metadata.price": {"gt": 10.25}}, m_cmp("price", "gt", 10.25)),
    ({"metadata.price": {"gte": 0, "lt": 10}}, lambda r: m_cmp("price", "gte", 0)(r) and m_cmp("price", "lt", 10)(r)),
    ({"metadata.price": {"lt": -3}}, m_cmp("price", "lt", -3)),
    # ranges on strings (lexical)
    ({"metadata.name": {"gt": "banana"}}, m_cmp("name", "gt", "banana")),
    ({"metadata.name": {"gte": "banana"}}, m_cmp("name", "gte", "banana")),
    ({"metadata.name": {"lt": "cherry"}}, m_cmp("name", "lt", "cherry")),
    ({"metadata.name": {"lte": "cherry"}}, m_cmp("name", "lte", "cherry")),
    ({"metadata.code": {"gt": "9"}}, m_cmp("code", "gt", "9")),  # lexical: "10" < "9"
    ({"metadata.code": {"lt": "9"}}, m_cmp("code", "lt", "9")),
    # exists
    ({"metadata.shop_id": {"exists": True}}, m_exists("shop_id")),  # includes the JSON null value
    ({"metadata.shop_id": {"exists": False}}, lambda r: not m_exists("shop_id")(r)),
    ({"metadata.flag": {"exists": True}}, m_exists("flag")),
    ({"metadata.missing_key": {"exists": True}}, m_exists("missing_key")),
    ({"metadata.missing_key": {"exists": False}}, lambda r: True),  # checked below: matches all rows
    # nested keys
    ({"metadata.a.b": 1}, m_eq("a.b", 1)),
    ({"metadata.a.b": "x"}, m_eq("a.b", "x")),
    ({"metadata.a.b": {"ne": 1}}, lambda r: not json_eq(r.meta("a.b"), 1)),
    ({"metadata.a.b": {"in": [1, 2]}}, lambda r: any(json_eq(r.meta("a.b"), v) for v in (1, 2))),
    ({"metadata.a.b": {"gte": 2}}, m_cmp("a.b", "gte", 2)),  # r5's a.b is an object: not compared
    ({"metadata.a.b": {"gt": 1, "lte": 2}}, lambda r: m_cmp("a.b", "gt", 1)(r) and m_cmp("a.b", "lte", 2)(r)),
    ({"metadata.a.b": {"exists": True}}, m_exists("a.b")),
    ({"metadata.a.b": {"exists": False}}, lambda r: not m_exists("a.b")(r)),
    ({"metadata.a.b.c": "deep"}, m_eq("a.b.c", "deep")),
    ({"metadata.a.b.c": {"exists": True}}, m_exists("a.b.c")),
    ({"metadata.a": 5}, m_eq("a", 5)),
    # string matching: case-sensitive, % and _ are literal; contains also matches a list holding the string
    ({"metadata.name": {"contains": "an"}}, m_text("name", lambda v: "an" in v)),
    ({"metadata.name": {"contains": "A"}}, m_text("name", lambda v: "A" in v)),
    ({"metadata.name": {"contains": "%_"}}, m_text("name", lambda v: "%_" in v)),
    ({"metadata.name": {"starts_with": "ch"}}, m_text("name", lambda v: v.startswith("ch"))),
    ({"metadata.name": {"starts_with": "_"}}, m_text("name", lambda v: v.startswith("_"))),
    ({"metadata.name": {"ends_with": "e"}}, m_text("name", lambda v: v.endswith("e"))),
    ({"metadata.name": {"ends_with": "%"}}, m_text("name", lambda v: v.endswith("%"))),
    ({"metadata.code": {"contains": "0"}}, m_text("code", lambda v: "0" in v)),
    ({"metadata.price": {"contains": "5"}}, lambda r: False),  # numbers are not strings
    (
        {"metadata.labels": {"contains": "red"}},
        lambda r: isinstance(r.meta("labels"), list) and "red" in r.meta("labels"),
    ),
    ({"metadata.labels": {"contains": "re"}}, lambda r: False),  # list membership, not substring of an item
    ({"metadata.a.b.c": {"starts_with": "de"}}, m_text("a.b.c", lambda v: v.startswith("de"))),
    ({"metadata.contains": {"contains": "e"}}, m_text("contains", lambda v: "e" in v)),
    ({"not": {"metadata.name": {"contains": "an"}}}, lambda r: not m_text("name", lambda v: "an" in v)(r)),
    # keys that collide with Django lookup / transform names are plain keys
    ({"metadata.contains": "yes"}, m_eq("contains", "yes")),
    ({"metadata.contains": {"ne": "yes"}}, lambda r: not json_eq(r.meta("contains"), "yes")),
    ({"metadata.contains": {"gt": "maybe"}}, m_cmp("contains", "gt", "maybe")),
    ({"metadata.contains": {"exists": True}}, m_exists("contains")),
    ({"metadata.in": 3}, m_eq("in", 3)),
    ({"metadata.in": {"in": [3, 4]}}, lambda r: any(json_eq(r.meta("in"), v) for v in (3, 4))),
    ({"metadata.in": {"gte": 4}}, m_cmp("in", "gte", 4)),
    ({"metadata.exact": None}, m_eq("exact", None)),
    ({"metadata.exact": {"exists": True}}, m_exists("exact")),
    ({"metadata.exact": {"lte": 1}}, m_cmp("exact", "lte", 1)),  # r2's exact is null: not compared
    ({"metadata.exact": {"gte": 1}}, m_cmp("exact", "gte", 1)),
    ({"metadata.isnull": True}, m_eq("isnull", True)),
    ({"metadata.isnull": {"exists": False}}, lambda r: not m_exists("isnull")(r)),
    ({"metadata.gt": {"gt": 1}}, m_cmp("gt", "gt", 1)),
    ({"metadata.gt": 2}, m_eq("gt", 2)),
]


@pytest.mark.parametrize(("filters", "predicate"), METADATA_CASES, ids=[_case_id(c) for c in METADATA_CASES])
def test_metadata_operators(data, filters, predicate):
    expected = data.expect(predicate)
    if expected == data.expect(lambda r: True):
        # A filter that legitimately matches every row: still compare exactly.
        assert data.select(filters) == expected
    else:
        assert_selects(data, filters, predicate, allow_empty=True)


# --- logical combinations ------------------------------------------------------------------------

LOGICAL_CASES = [
    (
        {"doc_type": "pdf", "metadata.lang": "zh"},  # top-level entries are ANDed
        lambda r: r.doc_type == "pdf" and json_eq(r.meta("lang"), "zh"),
    ),
    (
        {"and": [{"tags": "faq"}, {"doc_type": {"ne": "md"}}]},
        lambda r: "faq" in r.tags and r.doc_type != "md",
    ),
    (
        {"or": [{"metadata.lang": "zh"}, {"tags": {"any": ["release-notes"]}}]},
        lambda r: json_eq(r.meta("lang"), "zh") or "release-notes" in r.tags,
    ),
    (
        {"not": {"tags": "policy"}},
        lambda r: "policy" not in r.tags,
    ),
    (
        {"not": {"metadata.shop_id": 7}},
        lambda r: not json_eq(r.meta("shop_id"), 7),
    ),
    (
        {"not": {"tags": "faq", "doc_type": "pdf"}},  # not (A and B)
        lambda r: not ("faq" in r.tags and r.doc_type == "pdf"),
    ),
    (
        {"not": {"or": [{"doc_type": "pdf"}, {"doc_type": "md"}]}},
        lambda r: r.doc_type not in ("pdf", "md"),
    ),
    (
        {"not": {"metadata.flag": {"exists": True}}},
        lambda r: not m_exists("flag")(r),
    ),
    (
        {"not": {"not": {"tags": "howto"}}},
        lambda r: "howto" in r.tags,
    ),
    (
        {
            "doc_type": {"in": ["pdf", "docx", "txt"]},
            "or": [
                {"and": [{"metadata.price": {"gte": 5}}, {"not": {"tags": "policy"}}]},
                {"created_at": {"lt": "2026-01-01"}},
            ],
            "not": {"metadata.name": "banana"},
        },
        lambda r: (
            r.doc_type in ("pdf", "docx", "txt")
            and ((json_cmp(r.meta("price"), "gte", 5) and "policy" not in r.tags) or r.created_at < at(2026, 1, 1))
            and not json_eq(r.meta("name"), "banana")
        ),
    ),
    (
        {"or": [{"metadata.a.b": {"gt": 1, "lt": 1000}}, {"metadata.a.c": {"exists": True}}, {"doc_id": -1}]},
        lambda r: json_cmp(r.meta("a.b"), "gt", 1) or m_exists("a.c")(r),
    ),
    (
        {"and": [{"metadata.contains": {"exists": True}}, {"not": {"metadata.contains": "yes"}}]},
        lambda r: m_exists("contains")(r) and not json_eq(r.meta("contains"), "yes"),
    ),
]


@pytest.mark.parametrize(("filters", "predicate"), LOGICAL_CASES, ids=[repr(c[0])[:80] for c in LOGICAL_CASES])
def test_logical_combinations(data, filters, predicate):
    assert_selects(data, filters, predicate)


def test_no_filters_select_everything_in_scope(data):
    everything = data.expect(lambda r: True)
    assert data.select(None) == everything
    assert data.select({}) == everything


# --- errors --------------------------------------------------------------------------------------


def _nested_not(levels: int) -> dict:
    filters: dict = {"doc_type": "pdf"}
    for _ in range(levels):
        filters = {"not": filters}
    return filters


ERROR_CASES = [
    # (filters, fragments the message must contain)
    ({"colour": "red"}, ["'colour'", "unknown field"]),
    ({"metadata": {"shop_id": 7}}, ["'metadata'", "unknown field"]),
    ({"is_active": True}, ["'is_active'", "unknown field"]),  # removed: every stored chunk is searchable
    ({"doc_type": {"like": "pd%"}}, ["'like'", "'doc_type'", "eq, in, ne, nin"]),
    ({"created_at": {"in": ["2026-01-01"]}}, ["'in'", "'created_at'", "eq, gt, gte, lt, lte"]),
    ({"created_at": {"ne": "2026-01-01"}}, ["'ne'", "'created_at'", "eq, gt, gte, lt, lte"]),
    ({"tags": {"eq": "faq"}}, ["'eq'", "'tags'", "all, any, contains"]),
    (
        {"metadata.shop_id": {"regex": "7"}},
        ["'regex'", "metadata.shop_id", "eq, exists, gt, gte, in, lt, lte, ne, nin"],
    ),
    ({"doc_id": "12"}, ["doc_id", "integer", "string"]),
    ({"doc_id": {"in": [1, "2"]}}, ["doc_id", "integer"]),
    ({"doc_id": True}, ["doc_id", "integer", "boolean"]),
    ({"doc_id": 1.5}, ["doc_id", "integer"]),
    ({"doc_id": 2**63}, ["doc_id", "out of range"]),
    ({"doc_type": 5}, ["doc_type", "string", "number"]),
    ({"doc_type": {"in": ["pdf", 5]}}, ["doc_type", "string"]),
    ({"doc_type": "x" * (MAX_STRING + 1)}, ["doc_type", str(MAX_STRING)]),
    ({"created_at": {"gte": "yesterday"}}, ["created_at", "'yesterday'"]),
    ({"created_at": "2026-13-45"}, ["created_at", "2026-13-45"]),
    ({"created_at": 20260101}, ["created_at", "string"]),
    ({"metadata.shop_id": {"exists": "yes"}}, ["metadata.shop_id", "exists", "true or false"]),
    ({"metadata.shop_id": {"exists": 1}}, ["metadata.shop_id", "exists"]),
    ({"metadata.shop_id": {"gt": True}}, ["metadata.shop_id", "gt", "number or string"]),
    ({"metadata.shop_id": {"lte": None}}, ["metadata.shop_id", "lte", "number or string"]),
    ({"metadata.shop_id": [7, 8]}, ["metadata.shop_id", "array"]),
    ({"metadata.shop_id": {"in": [7, [8]]}}, ["metadata.shop_id", "in"]),
    ({"tags": 5}, ["tags", "string"]),
    ({"tags": {"any": "faq"}}, ["tags", "any", "non-empty list"]),
    ({"doc_type": {"in": []}}, ["doc_type", "in", "non-empty list"]),
    ({"doc_type": {"nin": "pdf"}}, ["doc_type", "nin", "non-empty list"]),
    ({"metadata.shop_id": {"in": []}}, ["metadata.shop_id", "in", "non-empty list"]),
    ({"tags": {"all": []}}, ["tags", "all", "non-empty list"]),
    ({"doc_id": {"in": list(range(MAX_LIST_ITEMS + 1))}}, ["doc_id", f"more than {MAX_LIST_ITEMS}"]),
    ({"metadata.n": {"nin": list(range(MAX_LIST_ITEMS + 1))}}, ["metadata.n", f"more than {MAX_LIST_ITEMS}"]),
    ({"tags": {"any": ["t"] * (MAX_LIST_ITEMS + 1)}}, ["tags", f"more than {MAX_LIST_ITEMS}"]),
    ([{"doc_type": "pdf"}], ["expected a JSON object", "array"]),
    ("doc_type", ["expected a JSON object", "string"]),
    (7, ["expected a JSON object", "number"]),
    ({"or": [{"doc_type": "pdf"}, "md"]}, ["or[1]", "expected a JSON object"]),
    ({"and": []}, ["and", "non-empty list"]),
    ({"or": {"doc_type": "pdf"}}, ["or", "non-empty list"]),
    ({"not": [{"doc_type": "pdf"}]}, ["not", "expected a JSON object"]),
    (_nested_not(MAX_DEPTH + 1), [f"deeper than {MAX_DEPTH}"]),
    ({f"metadata.k{i}": i for i in range(MAX_CLAUSES + 1)}, [f"more than {MAX_CLAUSES} clauses"]),
    ({"or": [{"doc_id": i} for i in range(MAX_CLAUSES + 1)]}, [f"more than {MAX_CLAUSES} clauses"]),
    ({"metadata.": 1}, ["metadata.", "invalid metadata key"]),
    ({"metadata.a..b": 1}, ["metadata.a..b", "invalid metadata key"]),
    ({"metadata..a": 1}, ["metadata..a", "invalid metadata key"]),
    ({"metadata.a.": 1}, ["metadata.a.", "invalid metadata key"]),
    ({"metadata.a b": 1}, ["metadata.a b", "invalid metadata key"]),
    ({"metadata." + "k" * 65: 1}, ["invalid metadata key"]),
    ({"metadata." + ".".join("k" * (MAX_DEPTH + 1)): 1}, ["invalid metadata key"]),
    ({"doc_type": {}}, ["doc_type", "empty operator object"]),
    ({"metadata.shop_id": {}}, ["metadata.shop_id", "empty operator object"]),
    ({"metadata.a\x00b": 1}, ["invalid metadata key"]),
    ({"doc_type": "pdf\x00"}, ["doc_type", "NUL"]),
    ({"tags": {"any": ["faq", "x\x00"]}}, ["tags", "NUL"]),
    ({"metadata.lang": "zh\x00"}, ["metadata.lang", "NUL"]),
    ({"metadata.lang": {"gt": "\x00"}}, ["metadata.lang", "NUL"]),
    ({"created_at": "2026-01-01\x00"}, ["created_at", "NUL"]),
    ({"created_at": {"lt": "9999-12-31T23:59:59-23:59"}}, ["created_at.lt", "outside the years 1-9999"]),
    ({"created_at": "0001-01-01T00:00:00+23:59"}, ["created_at", "outside the years 1-9999"]),
    ({"tags": {}}, ["tags", "empty operator object"]),
    ({"metadata.name": {"contains": 5}}, ["metadata.name", "contains", "string"]),
    ({"metadata.name": {"starts_with": None}}, ["metadata.name", "starts_with", "string"]),
    ({"metadata.name": {"ends_with": "x\x00"}}, ["metadata.name", "ends_with", "NUL"]),
    ({"doc_type": {"contains": "pd"}}, ["doc_type", "unknown operator 'contains'"]),
]


@pytest.mark.parametrize(("filters", "fragments"), ERROR_CASES, ids=[repr(c[0])[:60] for c in ERROR_CASES])
def test_invalid_filters_name_the_offending_part(filters, fragments):
    with pytest.raises(InvalidFilter) as info:
        compile_filters(filters)
    message = str(info.value)
    assert message == info.value.message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert info.value.code == "invalid_filter"


def test_unknown_operator_details_name_field_and_operator():
    with pytest.raises(InvalidFilter) as info:
        compile_filters({"or": [{"metadata.lang": {"startswith": "z"}}]})
    assert info.value.details == {"field": "metadata.lang", "operator": "startswith"}
    with pytest.raises(InvalidFilter) as info:
        compile_filters({"not": {"colour": "red"}})
    assert info.value.details == {"field": "colour"}
    assert "filters.not" in info.value.message


def test_limits_are_inclusive():
    """Exactly at each limit is accepted; one more is refused (the cases above)."""
    compile_filters(_nested_not(MAX_DEPTH))
    compile_filters({f"metadata.k{i}": i for i in range(MAX_CLAUSES)})
    compile_filters({"doc_id": {"in": list(range(MAX_LIST_ITEMS))}})
    compile_filters({"doc_type": "x" * MAX_STRING})
    compile_filters({"metadata." + ".".join("k" * MAX_DEPTH): 1, "metadata." + "k" * 64: 1})


# --- injection -----------------------------------------------------------------------------------

INJECTION = "x'; DROP TABLE knowledge_chunk; --"
INJECTION_KEY = "x');DROP_TABLE_knowledge_chunk;--"  # the key pattern forbids whitespace


def _table_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('knowledge_chunk') IS NOT NULL")
        return cursor.fetchone()[0]


INJECTION_FILTERS = [
    {f"metadata.{INJECTION_KEY}": 1},
    {f"metadata.{INJECTION_KEY}": {"ne": 1}, "doc_id": -1},
    {f"metadata.{INJECTION_KEY}": {"gt": 0}},
    {f"metadata.{INJECTION_KEY}": {"exists": True}},
    {f"metadata.a.{INJECTION_KEY}": {"lt": "z"}},
    {"doc_type": INJECTION},
    {"doc_type": {"in": ["pdf' OR '1'='1", INJECTION]}},
    {"tags": INJECTION},
    {"tags": {"any": [INJECTION, "' OR 1=1 --"]}},
    {"metadata.name": INJECTION},
    {"metadata.name": {"in": [INJECTION, "apple' OR '1'='1"]}},
    {"metadata.name": {"gt": "zzz' OR '1'='1"}},
    {'metadata.name"': {"exists": True}},
    {"or": [{"metadata.lang": "zh') OR ('1'='1"}, {"metadata.lang": {"lte": "' OR 1=1; --"}}]},
]


@pytest.mark.parametrize("filters", INJECTION_FILTERS, ids=[repr(f)[:60] for f in INJECTION_FILTERS])
def test_injection_attempts_select_nothing_and_leave_the_table(data, filters):
    before = Chunk.objects.count()
    assert data.select(filters) == set()
    assert _table_exists()
    assert Chunk.objects.count() == before
    assert data.select(None) == data.expect(lambda r: True)


def test_injection_shaped_key_with_whitespace_is_refused():
    with pytest.raises(InvalidFilter) as info:
        compile_filters({f"metadata.{INJECTION}": 1})
    assert "invalid metadata key" in info.value.message


def test_injection_shaped_key_is_a_literal_key(data):
    """The odd key is matched as data, not SQL: a row that really has it is found by every operator."""
    chunk = ChunkFactory(document=data.docs["pdf"], metadata={INJECTION_KEY: 5, "a": {INJECTION_KEY: "q"}})
    key = f"metadata.{INJECTION_KEY}"
    for filters in ({key: 5}, {key: {"gte": 5}}, {key: {"exists": True}}, {f"metadata.a.{INJECTION_KEY}": {"lt": "z"}}):
        assert data.select(filters) == {chunk.pk}, filters
    assert data.select({key: {"exists": False}}) == data.expect(lambda r: True)


# --- where the implementation departs from the documented semantics ------------------------------


def test_range_operators_only_compare_values_of_the_same_type(data):
    """Docstring: "Range operators compare JSON values of the same type"."""
    odd = {
        name: ChunkFactory(document=data.docs["md"], metadata={"rank": value}).pk
        for name, value in [("num", 5), ("str", "m"), ("true", True), ("null", None), ("list", [9]), ("obj", {"x": 9})]
    }
    assert data.select({"metadata.rank": {"gt": 1}}) == {odd["num"]}
    assert data.select({"metadata.rank": {"lt": 10}}) == {odd["num"]}
    assert data.select({"metadata.rank": {"gt": "a"}}) == {odd["str"]}
    assert data.select({"metadata.rank": {"lt": "z"}}) == {odd["str"]}


def test_not_is_the_complement_of_its_filter(data):
    """``not`` of a range / exists filter also keeps rows that lack the key."""
    everything = data.expect(lambda r: True)
    for inner in (
        {"metadata.price": {"gt": 5}},
        {"metadata.name": {"lt": "cherry"}},
        {"metadata.a.b": {"gte": 2}},
        {"metadata.flag": {"exists": True}},
        {"created_at": {"gt": "2026-01-01"}},
    ):
        selected = data.select(inner)
        assert selected and selected != everything
        assert data.select({"not": inner}) == everything - selected, inner


def test_metadata_equality_matches_a_list_that_contains_the_value(data):
    """Docstring: "Metadata equality uses JSON containment ..., so it also matches a list that contains the value"."""
    listed = ChunkFactory(document=data.docs["md"], metadata={"langs": ["zh", "en"], "n": {"ids": [1, 2]}}).pk
    single = ChunkFactory(document=data.docs["md"], metadata={"langs": "zh", "n": {"ids": 1}}).pk
    assert data.select({"metadata.langs": "zh"}) == {listed, single}
    assert data.select({"metadata.n.ids": 1}) == {listed, single}
    assert data.select({"metadata.langs": {"in": ["en", "de"]}}) == {listed}
    assert data.select({"metadata.langs": {"ne": "zh"}}) == data.expect(lambda r: True)


def test_numeric_metadata_keys_are_object_keys(data):
    """``metadata.0`` names the key "0" (the key pattern allows it), for every operator."""
    chunk = ChunkFactory(document=data.docs["md"], metadata={"0": 5, "2024": "x"}).pk
    assert data.select({"metadata.0": 5}) == {chunk}
    assert data.select({"metadata.0": {"gte": 5}}) == {chunk}
    assert data.select({"metadata.0": {"exists": True}}) == {chunk}
    assert data.select({"metadata.2024": {"exists": True}}) == {chunk}
    assert data.select({"metadata.2024": {"lte": "x"}}) == {chunk}


@pytest.mark.parametrize(
    "filters",
    [
        {"metadata.price": {"gt": float("inf")}},
        {"metadata.price": float("inf")},
        {"metadata.price": {"nin": [1, float("-inf")]}},
        {"metadata.price": {"lte": float("nan")}},
    ],
    ids=["gt-inf", "eq-inf", "nin-minus-inf", "lte-nan"],
)
def test_non_finite_numbers_are_invalid_filters(data, filters):
    with pytest.raises(InvalidFilter) as info:
        data.select(filters)  # compiling or running: either way no database error may escape
    assert "metadata.price" in info.value.message
