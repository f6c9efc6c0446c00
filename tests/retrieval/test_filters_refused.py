"""Filters the language refuses with a clear error (the field, the operator, the limit), and injection
attempts that select nothing and leave the tables as they were (the rows: filter_rows.py)."""

from __future__ import annotations

import pytest
from django.db import connection

from knowledge.models import Chunk
from retrieval.errors import InvalidFilter
from retrieval.filters import MAX_CLAUSES, MAX_DEPTH, MAX_LIST_ITEMS, MAX_STRING, compile_filters
from tests.factories import ChunkFactory

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
def test_injection_attempts_select_nothing_and_leave_the_table(filter_rows, filters):
    before = Chunk.objects.count()
    assert filter_rows.select(filters) == set()
    assert _table_exists()
    assert Chunk.objects.count() == before
    assert filter_rows.select(None) == filter_rows.expect(lambda r: True)


def test_injection_shaped_key_with_whitespace_is_refused():
    with pytest.raises(InvalidFilter) as info:
        compile_filters({f"metadata.{INJECTION}": 1})
    assert "invalid metadata key" in info.value.message


def test_injection_shaped_key_is_a_literal_key(filter_rows):
    """The odd key is matched as data, not SQL: a row that really has it is found by every operator."""
    chunk = ChunkFactory(document=filter_rows.docs["pdf"], metadata={INJECTION_KEY: 5, "a": {INJECTION_KEY: "q"}})
    key = f"metadata.{INJECTION_KEY}"
    for filters in ({key: 5}, {key: {"gte": 5}}, {key: {"exists": True}}, {f"metadata.a.{INJECTION_KEY}": {"lt": "z"}}):
        assert filter_rows.select(filters) == {chunk.pk}, filters
    assert filter_rows.select({key: {"exists": False}}) == filter_rows.expect(lambda r: True)


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
def test_non_finite_numbers_are_invalid_filters(filter_rows, filters):
    with pytest.raises(InvalidFilter) as info:
        filter_rows.select(filters)  # compiling or running: either way no database error may escape
    assert "metadata.price" in info.value.message
