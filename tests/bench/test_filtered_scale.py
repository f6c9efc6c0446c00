"""Smoke tests of ``bench.filtered_scale`` and its ``peers``: each filter means the same rows in
the service's filter language as in the numpy mask the ground truth and FAISS use (no timing, no peer
engine: those are bench/requirements.txt's, not the tests')."""

from __future__ import annotations

import numpy as np
import pytest

from bench.filtered_scale import peers
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
