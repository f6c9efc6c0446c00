"""``bench/_common.py``'s result files: a run keeps its own file, a later run the same day does not
overwrite it, and keyed runs merge into the day's file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import _common  # bench/ is not a package


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(_common, "_RUN_PATHS", {})
    return tmp_path


def test_a_run_rewrites_its_own_file_and_a_later_run_writes_another(results, monkeypatch):
    first = _common.write_result("scale", {"rows": 1})
    assert _common.write_result("scale", {"rows": 2}) == first  # the same run, as it goes
    monkeypatch.setattr(_common, "_RUN_PATHS", {})  # a later process
    second = _common.write_result("scale", {"rows": 3})
    assert second != first and second.name.endswith("-2.json")
    assert json.loads(first.read_text()) == {"rows": 2}
    assert json.loads(second.read_text()) == {"rows": 3}


def test_keyed_runs_merge_into_the_days_file(results, monkeypatch):
    path = _common.write_result("ingest", {"chunks_s": 30}, key="cmrc2018")
    monkeypatch.setattr(_common, "_RUN_PATHS", {})
    assert _common.write_result("ingest", {"chunks_s": 12}, key="scifact") == path
    assert json.loads(path.read_text()) == {"runs": {"cmrc2018": {"chunks_s": 30}, "scifact": {"chunks_s": 12}}}
