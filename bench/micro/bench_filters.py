"""Compiling a search's metadata filter into SQL: every filtered search does it once per request."""

from __future__ import annotations

import pytest

from retrieval.filters import compile_filters

FILTERS = {
    "one field": {"metadata.shop_id": 3},
    "nested": {
        "doc_type": {"in": ["pdf", "md"]},
        "created_at": {"gte": "2025-04-11", "lt": "2025-05-31"},
        "or": [{"tags": {"any": ["t3", "t4"]}}, {"metadata.campaign": {"ne": 7}}],
        "not": {"metadata.lang": "zh"},
    },
}


@pytest.mark.parametrize("name", FILTERS)
def test_compile_filters_to_sql(benchmark, name):
    compiled = benchmark(lambda: compile_filters(FILTERS[name]).sql)
    assert compiled.sql
