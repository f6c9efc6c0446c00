"""``bench.ingest.report``: the summary of ``bench.ingest``'s passes and its table, from totals written
by hand (no timing is measured)."""

from __future__ import annotations

import re

import pytest

from bench.ingest import report as ingest_report
from bench.ingest.stages import Timings


def test_the_summary_and_the_table_give_each_pass_its_rate_and_its_ratio_to_the_raw_encode(capsys):
    timings = Timings()
    for name, seconds in {"init": 0.5, "prepare": 1.5, "flush": 5.0, "embed": 6.0}.items():
        timings.seconds[name], timings.calls[name] = seconds, 2
    totals = {"I": 10.0, "R": 8.0, "G256": 8.5, "I0": 9.0}
    cpu_s = {"I": 12.0, "R": 9.0, "G256": 9.5, "I0": 11.0}
    result = {
        "blocks_detail": [{"chunks": 100, "ratio_I_vs_R": 0.7}, {"chunks": 100, "ratio_I_vs_R": 0.9}],
        "rounds_detail": [{"ratio": 0.8}],
        "texts_identical_to_db_rows": True,
        "flush_groups_identical_to_ingestion": True,
    }
    measured = {"totals": totals, "cpu_s": cpu_s, "timings": timings, "passes": [*totals], "replays": ["G256"]}
    ingest_report.summarize(result, **measured)
    summary = result["summary"]
    assert summary["ingest_chunks_per_s"] == 20.0 and summary["raw_encode_chunks_per_s"] == 25.0
    assert summary["ratio_ingest_vs_raw"] == 0.8 and summary["ratio_cpu_ingest_vs_raw"] == 0.75
    assert summary["graph_stage_share"] == pytest.approx(0.1)  # (I - I0) / I
    assert summary["ratio_raw_plus_overhead_model"] == pytest.approx(8 / (8 + 10 - 6), abs=1e-4)
    assert summary["ratio_per_block_min_median_max"] == [0.7, 0.8, 0.9]
    assert result["other_s"] == 3.0  # the I pass outside init, prepare and flush

    ingest_report.print_report(result, **measured, title="a run")
    cells = [re.split(r"\s{2,}", line.strip()) for line in capsys.readouterr().out.splitlines()]
    rows = {row[0]: row[1:] for row in cells}
    assert rows["raw encode, one call per block"] == ["8.00", "25.0", "100.0%", "9.0", "100.0%"]
    assert rows["raw encode in flush groups of 256"] == ["8.50", "23.5", "94.1%", "9.5", "94.7%"]
    assert rows["ingestion end to end"] == ["10.00", "20.0", "80.0%", "12.0", "75.0%"]
    assert rows["ingestion with the graph stage off"] == ["9.00", "22.2", "88.9%", "11.0", "81.8%"]
