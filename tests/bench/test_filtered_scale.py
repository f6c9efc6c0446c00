"""Smoke tests of ``bench.filtered_scale`` and its ``peers``: each filter means the same rows in
the service's filter language as in the numpy mask the ground truth and FAISS use (no timing, no peer
engine: those are bench/requirements.txt's, not the tests')."""

from __future__ import annotations

import numpy as np
import pytest

from bench.filtered_scale import acl, peers
from bench.filtered_scale.rows import load_rows

SHARES = {"none": 1.0, "segment 10 %": 0.10, "campaign 1 %": 0.01, "cohort 0.1 %": 0.001}
SHARES |= {"date range 5 %": 0.05, "tag in 2 %": 0.02}


def test_each_filter_keeps_its_share_of_100k_rows():
    fields = peers.Fields.of(np.arange(100_000))
    assert {flt.name: float(flt.mask(fields).mean()) for flt in peers.FILTERS} == pytest.approx(SHARES)


@pytest.mark.django_db
def test_the_service_filters_select_the_rows_of_the_numpy_masks():
    """Two slices loaded by the bench's COPY: documents 145-154 straddle the date range's end, 300-304
    carry the tags t0-t4; every filter matches some of the 1,500 rows and misses others."""
    from knowledge.models import Chunk
    from retrieval.filters import compile_filters
    from tests.factories import KnowledgeBaseFactory

    kb = KnowledgeBaseFactory()
    rng = np.random.default_rng(3)
    slices = [(14_500, 1_000), (30_000, 500)]
    for first, rows in slices:
        vectors = rng.standard_normal((rows, 8)).astype(np.float32)
        load_rows(kb, [f"passage {i}" for i in range(rows)], vectors, first)
    numbers = np.concatenate([np.arange(first, first + rows) for first, rows in slices])
    fields = peers.Fields.of(numbers)

    chunks = Chunk.objects.filter(knowledge_base=kb)
    row_of = {pk: int(content.rsplit(" ", 1)[1].rstrip("]")) for pk, content in chunks.values_list("pk", "content")}
    assert sorted(row_of.values()) == numbers.tolist()
    for flt in peers.FILTERS:
        selected = compile_filters(flt.service).apply(chunks)
        expected = set(numbers[flt.mask(fields)].tolist())
        assert {row_of[pk] for pk in selected.values_list("pk", flat=True)} == expected, flt.name
        assert len(expected) > 0 and (flt.service is None or len(expected) < len(numbers)), flt.name


def test_acl_readers_admit_their_share_of_the_documents_nested_and_spread():
    docs = 1_000
    acls = acl.document_acls(docs, (10.0, 1.0))
    ten = {d for d, a in enumerate(acls) if acl.principal(10) in a}
    one = {d for d, a in enumerate(acls) if acl.principal(1) in a}
    assert (len(ten), len(one)) == (100, 10) and one < ten
    assert all(a == [acl.OTHER] for d, a in enumerate(acls) if d not in ten)  # no row left open to "*"
    assert max(ten) - min(ten) > docs * 0.8  # spread over the corpus, not its first documents
    rows = np.arange(docs * peers.CHUNKS_PER_DOC)
    for percent, admitted in ((10.0, ten), (1.0, one)):
        mask = acl.row_mask(rows, docs, percent)
        assert mask.mean() == pytest.approx(percent / 100)
        assert set((rows[mask] // peers.CHUNKS_PER_DOC).tolist()) == admitted
        segment = peers.Fields.of(rows).segment == 3  # independent of the business fields
        assert mask[segment].mean() == pytest.approx(percent / 100)


def test_acl_percentages_parse_largest_first_and_refuse_what_is_no_share():
    assert acl.parse_percents("1,10, 0.1") == (10.0, 1.0, 0.1)
    assert (acl.principal(0.1), acl.scenario(10.0)) == ("group:acl-0.1", "acl 10 %")
    for text in ("0", "101", "ten", ""):
        with pytest.raises(SystemExit):
            acl.parse_percents(text)


@pytest.mark.django_db
def test_written_acls_select_the_rows_of_the_numpy_masks_in_sql_and_in_the_keyword_index(lexical_index_dir):
    """Ten documents loaded by the bench's COPY, their ACLs written by the bench's UPDATEs: each reader's
    SQL check and the keyword index's ACL terms (``bench.synthetic.build_keyword_index``) select the rows
    of its mask, and a reader holding only ``*`` reads none."""
    from django.db import connection

    from bench import synthetic
    from engines import get_lexical_index
    from knowledge.models import Chunk, Document
    from knowledge.selectors.search import analyzer_for_tenant
    from retrieval.filters import compile_filters
    from retrieval.keyword_filter import keyword_filter
    from tenants.principals import reader_of
    from tests.factories import KnowledgeBaseFactory

    def execute(statement, params=None):
        with connection.cursor() as cursor:
            cursor.execute(statement, params)

    kb = KnowledgeBaseFactory()
    rows = 1_000
    load_rows(kb, [f"passage {i}" for i in range(rows)], np.random.default_rng(5).standard_normal((rows, 8)), 0)
    documents = list(Document.objects.filter(knowledge_base=kb).order_by("id").values_list("id", flat=True))
    written = acl.write_acls(execute, kb.tenant_id, documents, (50.0, 10.0))
    assert written["documents"] == {"group:acl-50 group:acl-10": 1, "group:acl-50": 4, acl.OTHER: 5}

    chunks = Chunk.objects.filter(knowledge_base=kb)
    row_of = {pk: int(content.rsplit(" ", 1)[1].rstrip("]")) for pk, content in chunks.values_list("pk", "content")}
    assert not compile_filters(None, reader_of([])).apply(chunks).exists()
    version, analyzer, index = kb.active_version, analyzer_for_tenant(kb.tenant_id), get_lexical_index()
    assert synthetic.build_keyword_index(version) == rows
    for percent in (50.0, 10.0):
        compiled = compile_filters(None, reader_of([acl.principal(percent)]))
        expected = set(np.flatnonzero(acl.row_mask(np.arange(rows), len(documents), percent)).tolist())
        assert {row_of[pk] for pk in compiled.apply(chunks).values_list("pk", flat=True)} == expected
        hits = index.search(
            version.pk,
            kb.tenant_id,
            analyzer.tokens("passage"),
            rows,
            None,
            field_filter=keyword_filter(compiled, acl_terms=True),
        )
        assert {row_of[hit.chunk_id] for hit in hits} == expected


def test_the_report_gives_each_reader_and_each_build_as_ratios_to_the_unfiltered_p50():
    from bench.filtered_scale import report

    def cell(p50):
        return {"p50_ms": p50, "p95_ms": p50 * 2, "recall_at_10": 0.97}

    unfiltered = {"vector | none": cell(20.0), "hybrid | none": cell(40.0)}
    result = {
        "http": {"scenarios": unfiltered},
        "acl": {
            "update_s": 1.0,
            "documents": {},
            "vacuum_s": 0.5,
            "service_index": {"build_s": 3.0},
            "matching_rows": {"acl 10 %": 10_000},
            "engine": {"none": cell(2.0), "acl 10 %": cell(3.0)},
            "http": {"scenarios": {"vector | acl 10 %": cell(25.0), "hybrid | acl 10 %": cell(60.0)}},
        },
        "builds": {"m=16 ef_construction=64 ef_search=100": {"http": {"scenarios": {"vector | none": cell(10.0)}}}},
    }
    acl_row = next(line for line in report._acl_lines(result) if line.startswith("| acl 10 %"))
    assert acl_row.split(" | ")[1:] == [
        "10,000",
        "3.0 (6.0)",
        "0.970",
        "1.50x",
        "25.0 (50.0)",
        "1.25x",
        "60.0 (120.0)",
        "1.50x |",
    ]
    build_row = next(line for line in report._build_http_lines(result, ["none"]) if line.startswith("| vector, none"))
    assert build_row.endswith("| 20.0 (40.0) | 10.0 (20.0), 0.50x |")
