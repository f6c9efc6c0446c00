"""The filter language as the keyword index's filter (retrieval.keyword_filter): exact where it can be,
wider where a part does not translate, never narrower."""

import datetime as dt

import pytest

from engines import lexical_filter as lf
from retrieval.filters import compile_filters
from retrieval.keyword_filter import exact_field_filter, keyword_filter


def translated(filters):
    return keyword_filter(compile_filters(filters))


def us(text: str) -> int:
    return lf.microseconds(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC))


def test_no_filter_is_no_keyword_filter():
    assert translated(None) is None


@pytest.mark.parametrize(
    ("filters", "node"),
    [
        ({"doc_type": "faq"}, lf.Terms(("doc_type=faq",))),
        ({"doc_type": {"nin": ["faq", "pdf"]}}, lf.Not(lf.Terms(("doc_type=faq", "doc_type=pdf")))),
        ({"doc_id": {"in": [7, -1]}}, lf.DocIds((7,))),
        ({"doc_id": {"ne": 7}}, lf.Not(lf.DocIds((7,)))),
        ({"tags": "policy"}, lf.Terms(("tag=policy",))),
        ({"tags": {"any": ["a", "b"]}}, lf.Terms(("tag=a", "tag=b"))),
        ({"tags": {"all": ["a", "b"]}}, lf.And((lf.Terms(("tag=a",)), lf.Terms(("tag=b",))))),
        ({"metadata.shop": 101}, lf.Terms(("meta:shop=101",))),
        ({"metadata.geo.city": {"in": ["Lyon", 2.0]}}, lf.Terms(('meta:geo.city="Lyon"', "meta:geo.city=2"))),
        ({"metadata.gone": {"ne": None}}, lf.Not(lf.Terms(("meta:gone=null",)))),
        ({"created_at": {"gte": "2026-01-01", "lt": "2026-02-01T12:00:00"}}, lf.And((
            lf.CreatedRange(us("2026-01-01T00:00:00"), None, True, True),
            lf.CreatedRange(None, us("2026-02-01T12:00:00"), True, False),
        ))),
        ({"created_at": "2026-01-01T00:00:00+02:00"}, lf.CreatedRange(
            us("2025-12-31T22:00:00"), us("2025-12-31T22:00:00"), True, True
        )),
        ({"or": [{"doc_type": "faq"}, {"tags": "a"}], "not": {"metadata.x": 1}}, lf.And((
            lf.Or((lf.Terms(("doc_type=faq",)), lf.Terms(("tag=a",)))),
            lf.Not(lf.Terms(("meta:x=1",))),
        ))),
    ],
)  # fmt: skip
def test_each_field_translates_exactly(filters, node):
    assert translated(filters) == node


def test_a_part_that_does_not_translate_widens_the_filter_and_never_narrows_it():
    # Inside "and": the rest still filters (the leg checks the hits against SQL).
    assert translated({"metadata.price": {"gt": 5}, "tags": "a"}) == lf.Terms(("tag=a",))
    # Inside "or", or under "not", a wider part would be no filter or a narrower one: nothing is pushed.
    assert translated({"or": [{"metadata.price": {"gt": 5}}, {"tags": "a"}]}) is None
    assert translated({"not": {"metadata.name": {"starts_with": "x"}, "tags": "a"}}) is None
    assert translated({"metadata.price": {"exists": True}}) is None


def test_a_readers_check_translates_only_into_an_index_that_carries_acl_terms():
    reader = ("*", "group:hr")
    acl = lf.Terms(("acl=*", "acl=group:hr"))
    assert keyword_filter(compile_filters(None, reader)) is None  # an older index: the rows decide
    assert keyword_filter(compile_filters(None, reader), acl_terms=True) == acl
    both = keyword_filter(compile_filters({"doc_type": "faq"}, reader), acl_terms=True)
    assert both == lf.And((lf.Terms(("doc_type=faq",)), acl))


def test_a_chunks_acl_travels_with_its_index_entry_as_terms():
    fields = lf.filter_fields("txt", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), ["a"], {}, ["group:hr", "user:7"])
    assert {"acl=group:hr", "acl=user:7"} <= set(fields.terms)


def test_the_exact_filter_is_all_or_nothing_and_carries_the_readers_check():
    """For an index that filters without a check against SQL after (Milvus): a part that does not translate
    leaves no filter at all (the index refuses the search), never a wider one."""
    acl = lf.Terms(("acl=*", "acl=group:hr"))
    assert exact_field_filter(compile_filters(None)) is None
    assert exact_field_filter(compile_filters({"tags": "a"})) == lf.Terms(("tag=a",))
    assert exact_field_filter(compile_filters({"metadata.price": {"gt": 5}, "tags": "a"})) is None
    assert exact_field_filter(compile_filters(None, ("*", "group:hr"))) == acl
    both = exact_field_filter(compile_filters({"doc_type": "faq"}, ("*", "group:hr")))
    assert both == lf.And((lf.Terms(("doc_type=faq",)), acl))
