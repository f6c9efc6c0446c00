"""``relevance`` calibrated: a monotone map of the raw score onto P(judged relevant), with the constants
of its results file, carried over to what was stored on the raw scale."""

import importlib
import json
from pathlib import Path

import pytest

from retrieval import relevance_calibration
from retrieval.relevance_calibration import calibrated

ROOT = Path(__file__).resolve().parents[2]


def test_the_constants_are_those_of_the_results_file():
    fitted = json.loads((ROOT / relevance_calibration.RESULTS_FILE).read_text())["mapping"]
    assert (fitted["slope"], fitted["intercept"]) == (relevance_calibration.SLOPE, relevance_calibration.INTERCEPT)
    migration = importlib.import_module("retrieval.migrations.0005_relevance_calibrated_scale")
    assert (fitted["slope"], fitted["intercept"]) == (migration.SLOPE, migration.INTERCEPT)


def test_the_mapping_is_monotone_bounded_and_keeps_no_evidence_at_zero():
    raw = [step / 1000 for step in range(1001)]
    values = [calibrated(score) for score in raw]
    assert values[0] == 0.0  # no retriever scored the hit: what any threshold drops
    assert all(0.0 < value < 1.0 for value in values[1:])
    assert all(later > earlier for earlier, later in zip(values, values[1:], strict=False))
    fitted = json.loads((ROOT / relevance_calibration.RESULTS_FILE).read_text())["mapping"]
    assert calibrated(fitted["raw_at_0.5"]) == pytest.approx(0.5, abs=1e-3)
