"""``bench/filtered_measure.py``: the recall it judges against the exact top k."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import filtered_measure  # bench/ is not a package; its scripts import their siblings


def test_recall_is_the_share_of_the_exact_top_k_found_and_none_when_nothing_matches():
    truth = [np.array([4, 50, 120]), np.array([120, 4, 50]), np.array([50, 4, 120])]
    assert filtered_measure.recall([[4, 50], [4, 50, 120], []], truth, 10) == pytest.approx(
        (2 / 3 + 1 + 0) / 3, abs=1e-4
    )
    assert filtered_measure.recall([[1]], [np.array([], dtype=int)], 10) is None  # nothing matches: no recall
