"""``bench/filtered_measure.py``: the ground truth its recall is judged against."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import filtered_measure  # bench/ is not a package; its scripts import their siblings


def test_the_exact_top_10_of_a_filter_smaller_than_10_is_all_of_it_best_first():
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((200, 16)).astype(np.float32)
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    mask = np.zeros(200, dtype=bool)
    mask[[4, 50, 120]] = True
    for query, top in zip(queries, filtered_measure.exact_top10(vectors, queries, mask)):
        assert sorted(top.tolist()) == [4, 50, 120]
        assert (np.diff(vectors[top] @ query) <= 0).all()
    truth = filtered_measure.exact_top10(vectors, queries, mask)
    assert filtered_measure.recall([[4, 50], [4, 50, 120], []], truth, 10) == pytest.approx(
        (2 / 3 + 1 + 0) / 3, abs=1e-4
    )
    assert filtered_measure.recall([[1]], [np.array([], dtype=int)], 10) is None  # nothing matches: no recall
