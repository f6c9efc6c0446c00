"""The filter language (``retrieval.filters``) against real rows in PostgreSQL: what each operator,
field and combination selects (refused filters: test_filters_refused.py; the rows: filter_rows.py)."""

from __future__ import annotations

import pytest

from tests.factories import ChunkFactory
from tests.retrieval.filter_rows import (
    _case_id,
    assert_selects,
    at,
    json_cmp,
    json_eq,
    m_any,
    m_cmp,
    m_eq,
    m_exists,
    m_text,
)

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
def test_business_field_operators(filter_rows, filters, predicate):
    assert_selects(filter_rows, filters, predicate, allow_empty=True)


def test_doc_id_operators(filter_rows):
    pdf, md = filter_rows.docs["pdf"].pk, filter_rows.docs["md"].pk
    assert_selects(filter_rows, {"doc_id": pdf}, lambda r: filter_rows.doc_id(r) == pdf)
    assert_selects(filter_rows, {"doc_id": {"eq": md}}, lambda r: filter_rows.doc_id(r) == md)
    assert_selects(filter_rows, {"doc_id": {"ne": pdf}}, lambda r: filter_rows.doc_id(r) != pdf)
    assert_selects(filter_rows, {"doc_id": {"in": [pdf, md]}}, lambda r: filter_rows.doc_id(r) in (pdf, md))
    assert_selects(filter_rows, {"doc_id": {"nin": [pdf, md]}}, lambda r: filter_rows.doc_id(r) not in (pdf, md))
    missing = max(d.pk for d in filter_rows.docs.values()) + 1000
    assert_selects(filter_rows, {"doc_id": missing}, lambda r: False, allow_empty=True)


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
def test_created_at_operators(filter_rows, op, text, moment):
    assert_selects(filter_rows, {"created_at": {op: text}}, lambda r: COMPARE[op](r.created_at, moment))


def test_created_at_bare_value_is_equality_and_ranges_combine(filter_rows):
    assert_selects(filter_rows, {"created_at": "2026-01-01"}, lambda r: r.created_at == at(2026, 1, 1))
    assert_selects(
        filter_rows,
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
def test_metadata_operators(filter_rows, filters, predicate):
    expected = filter_rows.expect(predicate)
    if expected == filter_rows.expect(lambda r: True):
        # A filter that legitimately matches every row: still compare exactly.
        assert filter_rows.select(filters) == expected
    else:
        assert_selects(filter_rows, filters, predicate, allow_empty=True)


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
def test_logical_combinations(filter_rows, filters, predicate):
    assert_selects(filter_rows, filters, predicate)


def test_no_filters_select_everything_in_scope(filter_rows):
    everything = filter_rows.expect(lambda r: True)
    assert filter_rows.select(None) == everything
    assert filter_rows.select({}) == everything


# --- where the implementation departs from the documented semantics ------------------------------


def test_range_operators_only_compare_values_of_the_same_type(filter_rows):
    """Docstring: "Range operators compare JSON values of the same type"."""
    odd = {
        name: ChunkFactory(document=filter_rows.docs["md"], metadata={"rank": value}).pk
        for name, value in [("num", 5), ("str", "m"), ("true", True), ("null", None), ("list", [9]), ("obj", {"x": 9})]
    }
    assert filter_rows.select({"metadata.rank": {"gt": 1}}) == {odd["num"]}
    assert filter_rows.select({"metadata.rank": {"lt": 10}}) == {odd["num"]}
    assert filter_rows.select({"metadata.rank": {"gt": "a"}}) == {odd["str"]}
    assert filter_rows.select({"metadata.rank": {"lt": "z"}}) == {odd["str"]}


def test_not_is_the_complement_of_its_filter(filter_rows):
    """``not`` of a range / exists filter also keeps rows that lack the key."""
    everything = filter_rows.expect(lambda r: True)
    for inner in (
        {"metadata.price": {"gt": 5}},
        {"metadata.name": {"lt": "cherry"}},
        {"metadata.a.b": {"gte": 2}},
        {"metadata.flag": {"exists": True}},
        {"created_at": {"gt": "2026-01-01"}},
    ):
        selected = filter_rows.select(inner)
        assert selected and selected != everything
        assert filter_rows.select({"not": inner}) == everything - selected, inner


def test_metadata_equality_matches_a_list_that_contains_the_value(filter_rows):
    """Docstring: "Metadata equality uses JSON containment ..., so it also matches a list that contains the value"."""
    listed = ChunkFactory(document=filter_rows.docs["md"], metadata={"langs": ["zh", "en"], "n": {"ids": [1, 2]}}).pk
    single = ChunkFactory(document=filter_rows.docs["md"], metadata={"langs": "zh", "n": {"ids": 1}}).pk
    assert filter_rows.select({"metadata.langs": "zh"}) == {listed, single}
    assert filter_rows.select({"metadata.n.ids": 1}) == {listed, single}
    assert filter_rows.select({"metadata.langs": {"in": ["en", "de"]}}) == {listed}
    assert filter_rows.select({"metadata.langs": {"ne": "zh"}}) == filter_rows.expect(lambda r: True)


def test_numeric_metadata_keys_are_object_keys(filter_rows):
    """``metadata.0`` names the key "0" (the key pattern allows it), for every operator."""
    chunk = ChunkFactory(document=filter_rows.docs["md"], metadata={"0": 5, "2024": "x"}).pk
    assert filter_rows.select({"metadata.0": 5}) == {chunk}
    assert filter_rows.select({"metadata.0": {"gte": 5}}) == {chunk}
    assert filter_rows.select({"metadata.0": {"exists": True}}) == {chunk}
    assert filter_rows.select({"metadata.2024": {"exists": True}}) == {chunk}
    assert filter_rows.select({"metadata.2024": {"lte": "x"}}) == {chunk}
