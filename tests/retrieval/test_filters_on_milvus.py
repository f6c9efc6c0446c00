"""The filter cases of tests/retrieval/test_filters.py run on Milvus (Milvus Lite): every filter that
translates exactly (``retrieval.keyword_filter.exact_field_filter``) selects, inside Milvus, exactly
the rows the SQL filter selects; every other one is refused (fail closed), never answered wider. The
rows are filter_rows.py's, written to Milvus from the chunk table as a rebuild writes them, and Milvus
walks them (``walk``), though a search would scan so few rows in PostgreSQL."""

from __future__ import annotations

import pytest

from engines.base import SearchScope
from engines.milvus_index import MilvusVectorIndex, VectorIndexError
from knowledge.models import Chunk
from knowledge.stores import chunk_rows_of, store_tables
from retrieval.filters import compile_filters
from retrieval.keyword_filter import exact_field_filter
from tests.factories import DIMENSION, unit_vector
from tests.retrieval.filter_rows import Dataset, assert_selects
from tests.retrieval.test_filters import BUSINESS_CASES, COMPARE, LOGICAL_CASES, METADATA_CASES, MOMENTS

pytestmark = pytest.mark.django_db

_index: list[MilvusVectorIndex] = []


def cases(listed) -> list:
    return [case.values if hasattr(case, "values") else case for case in listed]


CASES = cases(BUSINESS_CASES) + cases(METADATA_CASES) + cases(LOGICAL_CASES)
CASES += [({"created_at": {op: text}}, None) for op in sorted(COMPARE) for text, _ in MOMENTS]


@pytest.fixture
def milvus(settings) -> MilvusVectorIndex:
    if not _index:  # one per run: Milvus Lite starts once
        _index.append(MilvusVectorIndex(store_tables().chunks, settings.MILVUS_URI, timeout_s=30, prefix="filters"))
    return _index[0]


class MilvusDataset(Dataset):
    """filter_rows' rows, selected by a Milvus search of the whole scope instead of by SQL."""

    index: MilvusVectorIndex
    reader: tuple[str, ...] | None = None

    def select(self, filters) -> set[int]:
        compiled = compile_filters(filters, self.reader)
        kb = next(iter(self.docs.values())).knowledge_base
        scope = SearchScope(kb.tenant_id, (kb.active_version_id,), DIMENSION)
        field_filter = exact_field_filter(compiled)
        if compiled.sql and field_filter is None:  # refused as a search refuses it
            return {hit.chunk_id for hit in self.index.search(scope, unit_vector(1), 100, compiled.sql)}
        hits = self.index.walk(scope, unit_vector(1), 100, field_filter)  # Milvus's answer at any size
        return {hit.chunk_id for hit in hits}


@pytest.fixture
def on_milvus(filter_rows, milvus) -> MilvusDataset:
    """The rows (and the other tenant's noise row) written to Milvus."""
    milvus.rewrite(chunk_rows_of(Chunk.objects.all()))
    data = MilvusDataset(filter_rows.ids, filter_rows.docs, filter_rows.base)
    data.index = milvus
    return data


@pytest.mark.parametrize(("filters", "predicate"), CASES, ids=[repr(case[0])[:80] for case in CASES])
def test_each_filter_selects_what_sql_selects_or_is_refused(filter_rows, on_milvus, filters, predicate):
    if exact_field_filter(compile_filters(filters)) is None:
        with pytest.raises(VectorIndexError) as refused:
            on_milvus.select(filters)
        assert refused.value.cause == "vector_filter_unsupported"
        return
    assert on_milvus.select(filters) == filter_rows.select(filters)
    if predicate is not None:
        assert_selects(on_milvus, filters, predicate, allow_empty=True)


def test_business_fields_and_metadata_equality_are_all_exact():
    exact = cases(BUSINESS_CASES) + [case for case in cases(METADATA_CASES) if _equality(case[0])]
    assert len(exact) > 20
    assert all(exact_field_filter(compile_filters(filters)) is not None for filters, _ in exact)


def _equality(filters) -> bool:
    (value,) = filters.values()
    return not isinstance(value, dict) or set(value) <= {"eq", "ne", "in", "nin"}


def test_a_readers_acl_check_selects_inside_milvus(filter_rows, on_milvus):
    hr = Chunk.objects.get(pk=filter_rows.ids["r1"])
    hr.acl = ["group:hr"]
    hr.save(update_fields=["acl"])
    on_milvus.index.rewrite(chunk_rows_of(Chunk.objects.filter(pk=hr.pk)))
    everything = set(filter_rows.ids.values())
    on_milvus.reader = ("*", "user:1")
    assert on_milvus.select(None) == {pk for pk in everything if pk != hr.pk}  # public rows only
    on_milvus.reader = ("*", "user:1", "group:hr")
    assert on_milvus.select(None) == everything
    assert on_milvus.select({"doc_type": "pdf"}) == {filter_rows.ids["r0"], hr.pk}


def test_the_scope_keeps_other_tenants_rows_out(filter_rows, on_milvus):
    assert on_milvus.select(None) == set(filter_rows.ids.values())
    assert on_milvus.select({"metadata.shop_id": 7}) == filter_rows.select({"metadata.shop_id": 7})
