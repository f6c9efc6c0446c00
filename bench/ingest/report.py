"""bench/ingest/'s figures from its passes' totals: the summary in its result (rates, ratios to the raw
encode on wall and CPU seconds, the graph stage's share, where ingestion's time goes) and the printed
tables."""

from __future__ import annotations

import statistics

from bench.harness import tables
from bench.ingest.stages import STAGE_LABELS, Timings


def _chunks(result: dict) -> int:
    """The chunks of the blocks measured (each pass embedded them all)."""
    return sum(block["chunks"] for block in result["blocks_detail"])


def _rates(result: dict, totals: dict) -> dict:
    """Chunks a second of each pass."""
    return {p: _chunks(result) / totals[p] for p in totals if totals[p]}


def summarize(result: dict, *, totals: dict, cpu_s: dict, timings: Timings, passes: list, replays: list):
    """Put the summary of the run's ``totals`` (seconds per pass over all blocks; ``cpu_s`` likewise) and
    its stage ``timings`` into ``result``, whose ``blocks_detail`` and ``rounds_detail`` are set."""
    rate = _rates(result, totals)
    ratio = totals["R"] / totals["I"]
    block_ratios = [b["ratio_I_vs_R"] for b in result["blocks_detail"]]
    stage_s = {name: round(v, 3) for name, v in sorted(timings.seconds.items())}
    # Top-level stages of Ingester.ingest on its own thread: constructor, per-file _prepare, per-flush
    # _flush (hand the group to the embedding thread, write the one before); the last group's write
    # comes after the last _flush, so it counts as "other".
    top = ["init", "prepare", "flush"]
    accounted = sum(timings.seconds.get(name, 0.0) for name in top)
    other = totals["I"] - accounted
    result.update(
        stages_s=stage_s,
        stage_calls=dict(timings.calls),
        other_s=round(other, 3),
        summary={
            "ingest_chunks_per_s": round(rate["I"], 2),
            "raw_encode_chunks_per_s": round(rate["R"], 2),
            "raw_encode_flush_groups_chunks_per_s": {p[1:]: round(rate[p], 2) for p in replays},
            "ratio_ingest_vs_raw": round(ratio, 4),
            # CPU seconds (this process, all threads, + its PostgreSQL backend) instead of wall time:
            # less sensitive to other processes competing for the cores.
            "cpu_s": {p: round(v, 2) for p, v in cpu_s.items() if v},
            "ratio_cpu_ingest_vs_raw": round(cpu_s["R"] / cpu_s["I"], 4) if cpu_s["I"] else None,
            "ratio_flush_groups_vs_raw": {p[1:]: round(totals["R"] / totals[p], 4) for p in replays},
            # Less noise-sensitive: raw encode time plus ingestion's measured non-embedding time.
            "ratio_raw_plus_overhead_model": round(
                totals["R"] / (totals["R"] + totals["I"] - timings.seconds["embed"]), 4
            ),
            "non_embedding_s_per_1000_chunks": round(
                (totals["I"] - timings.seconds["embed"]) / _chunks(result) * 1000, 2
            ),
            "ratio_per_round": [row["ratio"] for row in result["rounds_detail"]],
            # --compare-models: each model's ingestion rate, and its speed relative to the I pass.
            "compared_ingest_chunks_per_s": {p[2:]: round(rate[p], 2) for p in passes if p.startswith("I:")},
            "compared_speedup_vs_ingest": {
                p[2:]: round(totals["I"] / totals[p], 4) for p in passes if p.startswith("I:")
            },
            "compared_speedup_vs_ingest_cpu": {
                p[2:]: round(cpu_s["I"] / cpu_s[p], 4) for p in passes if p.startswith("I:") and cpu_s[p]
            },
            # --compare-models: each model's raw embed_documents of the same texts (one call per block).
            "compared_raw_chunks_per_s": {p[2:]: round(rate[p], 2) for p in passes if p.startswith("R:")},
            "compared_raw_speedup_vs_raw": {
                p[2:]: round(totals["R"] / totals[p], 4) for p in passes if p.startswith("R:")
            },
            # --graph-off: the share of ingestion's wall (and CPU) time the graph stage adds, (I - I0) / I
            "graph_stage_share": round(1 - totals["I0"] / totals["I"], 4) if "I0" in totals else None,
            "graph_stage_share_cpu": round(1 - cpu_s["I0"] / cpu_s["I"], 4) if "I0" in cpu_s else None,
            "ratio_per_block_min_median_max": [
                min(block_ratios),
                round(statistics.median(block_ratios), 4),
                max(block_ratios),
            ],
            "goal": 0.85,
            "goal_met": ratio >= 0.85,
        },
    )


def print_report(result: dict, *, totals: dict, cpu_s: dict, timings: Timings, passes: list, replays: list, title: str):
    """The tables of a summarized run (``summarize``)."""
    summary = result["summary"]
    rate = _rates(result, totals)
    other = result["other_s"]
    labels = [
        ("R", "raw encode, one call per block"),
        *((p, f"raw encode in flush groups of {p[1:]}") for p in replays),
        ("I", "ingestion end to end"),
        *((p, f"{'ingestion with' if p[0] == 'I' else 'raw encode,'} {p[2:]}") for p in passes if ":" in p),
        *((p, "ingestion with the graph stage off") for p in passes if p == "I0"),
    ]
    tables.print_table(
        ["pass (sum over all blocks and rounds)", "seconds", "chunks/s", "vs raw", "CPU s", "vs raw (CPU)"],
        [
            [
                label,
                f"{totals[p]:.2f}",
                f"{rate[p]:.1f}",
                f"{totals['R'] / totals[p]:.1%}",
                f"{cpu_s[p]:.1f}",
                f"{cpu_s['R'] / cpu_s[p]:.1%}",
            ]
            for p, label in labels
        ],
        title=title,
    )
    stage_rows = []
    for name, label in STAGE_LABELS:
        if name not in timings.calls:
            continue
        seconds = timings.seconds[name]
        stage_rows.append([label, f"{seconds:.2f}", f"{seconds / totals['I']:.1%}", timings.calls[name]])
    stage_rows.append(
        [
            "other (outside init, prepare and flush: the last group's write among it)",
            f"{other:.2f}",
            f"{other / totals['I']:.1%}",
            "",
        ]
    )
    tables.print_table(["ingestion stage", "seconds", "share", "calls"], stage_rows, title="Where ingestion time goes")
    if summary["graph_stage_share"] is not None:
        print(
            f"\ngraph stage: {summary['graph_stage_share']:.1%} of ingestion's wall time "
            f"({summary['graph_stage_share_cpu']:.1%} of its CPU seconds), (I - I0) / I"
        )
    print(
        f"\nsummary: ingest {summary['ingest_chunks_per_s']} chunks/s vs raw encode "
        f"{summary['raw_encode_chunks_per_s']} chunks/s -> {summary['ratio_ingest_vs_raw']:.1%} (goal 85 %: "
        f"{'met' if summary['goal_met'] else 'NOT met'}); by CPU time {summary['ratio_cpu_ingest_vs_raw']:.1%}; "
        f"raw + measured overhead model "
        f"{summary['ratio_raw_plus_overhead_model']:.1%}; per round {summary['ratio_per_round']}, "
        f"per block min/median/max {summary['ratio_per_block_min_median_max']}; "
        f"texts identical to DB rows: {result['texts_identical_to_db_rows']}; "
        f"flush groups as predicted: {result['flush_groups_identical_to_ingestion']}"
    )
