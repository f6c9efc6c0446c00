"""``bench.harness.stats``: the recall a benchmark judges against the exact top k."""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness.stats import recall


def test_recall_is_the_share_of_the_exact_top_k_found_and_none_when_nothing_matches():
    truth = [np.array([4, 50, 120]), np.array([120, 4, 50]), np.array([50, 4, 120])]
    assert recall([[4, 50], [4, 50, 120], []], truth, 10) == pytest.approx((2 / 3 + 1 + 0) / 3, abs=1e-4)
    assert recall([[1]], [np.array([], dtype=int)], 10) is None  # nothing matches: no recall
