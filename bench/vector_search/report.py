"""The tables of one ``bench.vector_search`` run, from its result alone (printed at the end of a run, or
again from its JSON).

    .venv/bin/python -m bench.vector_search.report bench/results/vector_search-<date>.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.harness import tables


def print_report(result: dict) -> None:
    load, real = result["load"], result["real_passages"]
    embedded = "cache" if real["from_cache"] else f"{real['embed_s']:.0f} s"
    rows_in = result["scenario_rows"]
    plans = result["plans"]
    depth = result["service_candidate_depth"]
    top_k = result["config"]["top_k"]
    tables.print_table(
        ["step", "value"],
        [
            ["real passages embedded", f"{real['count']} ({embedded})"],
            [
                "rows loaded by COPY",
                f"{load['chunks']:,} in {load['copy_s']:.1f} s ({load['copy_rows_per_s']:,} rows/s)",
            ],
            [
                "HNSW build (after load)",
                f"{load['hnsw_build_s']:.1f} s over {load['hnsw_rows_indexed']:,} rows, {load['hnsw_index_mb']} MB",
            ],
            ["ANALYZE", f"{load['analyze_s']:.1f} s"],
        ],
        title="Load",
    )
    for config, http in result["http"].items():
        rows = []
        for name, h in http["scenarios"].items():
            plan = plans[name]
            rows.append(
                [
                    name,
                    f"{rows_in[name]:,}",
                    plan["path"] + ("" if plan["uses_hnsw_index"] else " (no hnsw)"),
                    h["p50_ms"],
                    h["p95_ms"],
                    h["mean_ms"],
                    h["server_view"]["p50_ms"],
                    h["server_stage_p50_ms"].get("embed"),
                    h["server_stage_p50_ms"].get("vector"),
                    result["inprocess_index_search"][name][f"k={depth}"]["p50_ms"],
                    result["inprocess_count_probe"][name]["p50_ms"],
                    h["short"],
                ]
            )
        headers = ["scenario", "rows", "plan", "HTTP p50", "p95", "mean", "view p50", "embed p50", "vector p50"]
        tables.print_table(
            [*headers, f"in-proc k={depth}", "probe p50", "<k"],
            rows,
            title=(
                f"HTTP latency (ms), TORCH_THREADS={config}, {h['n']} sequential requests per scenario, "
                f"top_k={top_k}; query embedding alone in-process p50 "
                f"{result['inprocess_query_embedding'][config]['p50_ms']} ms"
            ),
        )
    exact_vs_hnsw = result["inprocess_exact_vs_hnsw"]
    tables.print_table(
        ["scope", "rows", f"exact p50 (k={depth})", "exact p95", f"hnsw p50 (k={depth})", "hnsw p95", "default path"],
        [
            [
                name,
                f"{rows_in[name]:,}",
                timings["exact"]["p50_ms"],
                timings["exact"]["p95_ms"],
                timings["hnsw"]["p50_ms"],
                timings["hnsw"]["p95_ms"],
                plans[name]["path"],
            ]
            for name, timings in exact_vs_hnsw.items()
        ],
        title=(
            "In-process PgVectorIndex.search, exact vs HNSW forced (ms), threshold today "
            f"{result['settings']['VECTOR_EXACT_SCAN_THRESHOLD']}"
        ),
    )
    recall = result["recall"]
    tables.print_table(
        ["scope", "ef_search", "recall@10", "min", "<10 rows", "exact fallbacks", "search p50 ms"],
        [
            [
                name,
                ef,
                f"{r['recall_at_k']:.3f}",
                r["min_recall"],
                r["queries_with_fewer_than_k"],
                r["exact_fallbacks"],
                r["search"]["p50_ms"],
            ]
            for name, by_ef in recall["by_scenario"].items()
            for ef, r in by_ef.items()
        ],
        title=f"HNSW recall@{recall['k']} vs exact, {recall['queries']} queries",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="a run's bench/results/vector_search-<date>.json")
    print_report(json.loads(parser.parse_args().result.read_text()))


if __name__ == "__main__":
    main()
