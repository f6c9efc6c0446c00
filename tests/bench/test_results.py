"""``bench.harness.results``' result files: a run keeps its own file, a later run the same day does not
overwrite it, keyed runs merge into the day's file, and every result names its date, commit, load and
command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.harness import results as bench_results


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(bench_results, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(bench_results, "_RUN_PATHS", {})
    return tmp_path


def measured(path: Path) -> dict:
    """The result as the benchmark gave it (without the run's own description)."""
    payload = json.loads(path.read_text())
    payload.pop("run")
    return payload


def test_a_run_rewrites_its_own_file_and_a_later_run_writes_another(results, monkeypatch):
    first = bench_results.write_result("scale", {"rows": 1})
    assert bench_results.write_result("scale", {"rows": 2}) == first  # the same run, as it goes
    monkeypatch.setattr(bench_results, "_RUN_PATHS", {})  # a later process
    second = bench_results.write_result("scale", {"rows": 3})
    assert second != first and second.name.endswith("-2.json")
    assert measured(first) == {"rows": 2}
    assert measured(second) == {"rows": 3}


def test_keyed_runs_merge_into_the_days_file(results, monkeypatch):
    path = bench_results.write_result("ingest", {"chunks_s": 30}, key="cmrc2018")
    monkeypatch.setattr(bench_results, "_RUN_PATHS", {})
    assert bench_results.write_result("ingest", {"chunks_s": 12}, key="scifact") == path
    runs = json.loads(path.read_text())["runs"]
    assert {key: {k: v for k, v in run.items() if k != "run"} for key, run in runs.items()} == {
        "cmrc2018": {"chunks_s": 30},
        "scifact": {"chunks_s": 12},
    }
    assert all("run" in run for run in runs.values())


def test_a_result_names_its_date_commit_load_and_command(results):
    run = json.loads(bench_results.write_result("load", {"rps": 1}).read_text())["run"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", run["date_utc"])
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", run["commit"])  # this checkout is a git work tree
    assert len(run["loadavg_at_start"]) == 3 and len(run["loadavg_at_write"]) == 3
    assert run["command"].startswith(".venv/bin/python ")
