"""Business-field filters inside the keyword index (engines.lexical_filter): a chunk's fields as terms,
and each engine's filter (tantivy always, Elasticsearch where ``ELASTICSEARCH_URL`` is set, its
requests also against the recording fake) giving exactly the entries a plain predicate keeps, with
the unfiltered search's scores."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import tantivy

from engines import lexical_filter as lf
from engines.base import LexicalDocument, LexicalIndexError
from engines.tantivy_index import TantivyLexicalIndex
from tests.engines.lexical_support import (
    STATE,
    TENANT,
    VERSION,
    bulk_ok,
    es_index,
    ndjson,
)

DAY = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def test_a_chunks_fields_are_its_doc_type_tags_scalar_metadata_and_creation_time():
    fields = lf.filter_fields(
        "faq",
        dt.datetime(1970, 1, 2, 0, 0, 1, 5, tzinfo=dt.UTC),
        ["policy", "eu"],
        {
            "shop": 101,
            "price": 2.0,
            "ratio": 0.25,
            "lang": "zh",
            "live": True,
            "gone": None,
            "codes": ["a", 3, None, ["nested"], {"x": 1}],
            "geo": {"city": "Lyon", "zip": {"a": {"b": {"c": {"d": 1}}}}},
            "dotted.key": 1,
            "with space": 1,
            "long": "x" * 501,
        },
    )
    assert fields.created_at_us == 86_401_000_005
    assert fields.terms == (
        "doc_type=faq",
        "tag=policy",
        "tag=eu",
        "meta:shop=101",
        "meta:price=2",
        "meta:ratio=0.25",
        'meta:lang="zh"',
        "meta:live=true",
        "meta:gone=null",
        'meta:codes="a"',
        "meta:codes=3",
        'meta:geo.city="Lyon"',
    )  # zip.a.b.c.d is six levels deep: no filter can name it


def entry(chunk_id: int, *, doc_type: str, tags: list[str], metadata: dict, day: int, doc_id: int) -> LexicalDocument:
    created = DAY + dt.timedelta(days=day)
    fields = lf.filter_fields(doc_type, created, tags, metadata)
    return LexicalDocument(chunk_id, doc_id, TENANT, "warranty " * (1 + chunk_id % 3) + f"item{chunk_id}", fields)


ROWS = [
    {
        "chunk_id": i,
        "doc_type": ["faq", "pdf"][i % 2],
        "tags": [f"t{i % 3}"],
        "metadata": {"shop": i % 4, "lang": ["zh", "en"][i % 2]},
        "day": i,
        "doc_id": 100 + i // 5,
    }  # fmt: skip
    for i in range(1, 21)
]

# Each filter with the plain predicate it stands for.
CASES = {
    "term": (lf.Terms((lf.metadata_term(["shop"], 1),)), lambda r: r["metadata"]["shop"] == 1),
    "any of": (lf.Terms((lf.tag_term("t0"), lf.tag_term("t2"))), lambda r: r["tags"][0] in ("t0", "t2")),
    "none": (lf.Terms(()), lambda r: False),
    "documents": (lf.DocIds((101, 103)), lambda r: r["doc_id"] in (101, 103)),
    "range": (
        lf.CreatedRange(lf.microseconds(DAY + dt.timedelta(days=5)), lf.microseconds(DAY + dt.timedelta(days=9)), False),
        lambda r: 5 < r["day"] <= 9,
    ),
    "open range": (lf.CreatedRange(None, lf.microseconds(DAY + dt.timedelta(days=3)), True, False), lambda r: r["day"] < 3),
    "and, or, not": (
        lf.And(
            (
                lf.Or((lf.Terms((lf.doc_type_term("faq"),)), lf.Terms((lf.metadata_term(["shop"], 3),)))),
                lf.Not(lf.Terms((lf.tag_term("t1"),))),
            )
        ),
        lambda r: (r["doc_type"] == "faq" or r["metadata"]["shop"] == 3) and r["tags"] != ["t1"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_field_filter_keeps_exactly_the_matching_entries_with_unfiltered_scores(index, case):
    index.build_version(VERSION, [entry(**row) for row in ROWS], **STATE)
    node, keep = CASES[case]
    unfiltered = {hit.chunk_id: hit.score for hit in index.search(VERSION, TENANT, ["warranty"], 100, None)}
    hits = index.search(VERSION, TENANT, ["warranty"], 100, None, None, node)
    assert sorted(hit.chunk_id for hit in hits) == [row["chunk_id"] for row in ROWS if keep(row)]
    assert all(hit.score == pytest.approx(unfiltered[hit.chunk_id]) for hit in hits)
    assert index.state(VERSION).filters


def test_tantivy_index_built_before_the_fields_serves_without_them_until_rebuilt(tmp_path):
    """A generation of the four-field schema (as released before): writes and unfiltered searches go
    on, a field filter is refused (the leg then reads the chunk ids), a rebuild brings the fields."""
    old = tantivy.SchemaBuilder()
    old.add_unsigned_field("chunk_id", stored=True, indexed=True, fast=True)
    old.add_unsigned_field("doc_id", indexed=True, fast=True)
    old.add_unsigned_field("tenant_id", indexed=True, fast=True)
    old.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
    generation = tmp_path / f"kbv-{VERSION}" / "gen-1"
    generation.mkdir(parents=True)
    tantivy.Index(old.build(), path=str(generation))
    (generation / "analyzer.json").write_text(json.dumps(STATE))
    (generation.parent / "CURRENT").write_text("gen-1")

    engine = TantivyLexicalIndex(tmp_path)
    engine.write(VERSION, [entry(**row) for row in ROWS[:4]], replacing=[100], **STATE)
    assert [hit.chunk_id for hit in engine.search(VERSION, TENANT, ["item3"], 10, None)] == [3]
    assert not engine.state(VERSION).filters
    with pytest.raises(LexicalIndexError) as caught:
        engine.search(VERSION, TENANT, ["warranty"], 10, None, None, lf.DocIds((100,)))
    assert caught.value.cause == "no_filter_fields"

    engine.build_version(VERSION, [entry(**row) for row in ROWS[:4]], **STATE)
    assert engine.state(VERSION).filters
    hits = engine.search(VERSION, TENANT, ["warranty"], 10, None, None, lf.Terms((lf.doc_type_term("pdf"),)))
    assert sorted(hit.chunk_id for hit in hits) == [1, 3]


def test_es_search_puts_a_field_filter_in_filter_context(fake):
    fake.route("POST", "/unit-kbv-3/_search", body={"hits": {"hits": []}})
    node = lf.And(
        (
            lf.Not(lf.Terms(("tag=a",))),
            lf.Or((lf.DocIds((5,)), lf.CreatedRange(10, None, False))),
            lf.Terms(()),
        )
    )
    es_index(fake.url).search(3, TENANT, ["x"], 10, None, None, node)
    assert fake.requests[0].json()["query"]["bool"]["filter"] == [
        {"term": {"tenant_id": TENANT}},
        {
            "bool": {
                "filter": [
                    {"bool": {"must_not": [{"terms": {"filters": ["tag=a"]}}]}},
                    {
                        "bool": {
                            "should": [{"terms": {"doc_id": [5]}}, {"range": {"created_at": {"gt": 10}}}],
                            "minimum_should_match": 1,
                        }
                    },
                    {"match_none": {}},
                ]
            }
        },
    ]


@pytest.mark.parametrize(("meta", "sent"), [({**STATE, "filters": "1"}, True), (STATE, False)])
def test_es_writes_the_fields_only_into_a_generation_whose_mapping_has_them(fake, meta, sent):
    fake.route("HEAD", "/_alias/unit-kbv-3", 200, {})
    fake.route("GET", "/unit-kbv-3/_mapping", body={"unit-kbv-3-0": {"mappings": {"_meta": meta}}})
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    row = ROWS[0]
    es_index(fake.url).write(3, [entry(**row)], **STATE)
    (load,) = [request for request in fake.requests if request.path == "/_bulk"]
    source = ndjson(load)[1]
    assert ("filters" in source and "created_at" in source) is sent
    if sent:
        assert source["filters"] == ["doc_type=pdf", "tag=t1", "meta:shop=1", 'meta:lang="en"']
