"""The headline figures are the results files', and the relevance results ran at today's defaults.

docs/benchmarks/results/relevance.json holds, per shared set, what ``manage.py evaluate`` measured (its
date, load, commit and command) and the defaults it ran with. docs/BENCHMARKS.md's "Relevance per set"
table and the README's headline relevance row are rendered from it here and must equal what the docs
show; the defaults it records must be the code's, so changing a default fails this until the sets are
re-run. The README's rows of latency at 100k chunks, cache hits, throughput and ingestion are rendered
from ``latency-100k.json`` (``bench.hybrid_ab``'s file, the "after" tree) and ``ingestion.json``
(``bench.ingest``'s). To print the table and the rows after updating a file: ``python -m tests.test_docs_figures``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks" / "results" / "relevance.json"
LATENCY = ROOT / "docs" / "benchmarks" / "results" / "latency-100k.json"
INGESTION = ROOT / "docs" / "benchmarks" / "results" / "ingestion.json"
BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
README = ROOT / "README.md"
NAMES = {"scifact": "SciFact", "xquad-en": "XQuAD-en", "xquad-zh": "XQuAD-zh", "cmrc2018": "CMRC 2018", "drcd": "DRCD"}
TABLE = re.compile(r"<!-- relevance-table: .*? -->\n(.*?)<!-- /relevance-table -->", re.S)


def results() -> dict:
    return json.loads(RESULTS.read_text(encoding="utf-8"))


def figure(value: float | None, digits: int = 4) -> str:
    return "skipped" if value is None else f"{value:.{digits}f}"


def relevance_table(data: dict) -> str:
    """BENCHMARKS.md's table: one row per set, nDCG@10 per mode, hybrid's other metrics, when and where."""
    lines = [
        "| set (split, judged queries) | vector | bm25 | **hybrid** | hybrid R@10 / R@100 / MRR@10 | measured (UTC, 1-minute load), commit |",
        "|---|---:|---:|---:|---|---|",
    ]
    for row in data["sets"]:
        ndcg, hybrid = row["ndcg@10"], row["hybrid"]
        others = " / ".join(figure(hybrid[metric]) for metric in ("recall@10", "recall@100", "mrr@10"))
        lines.append(
            f"| {NAMES[row['dataset']]} ({row['split']}, {row['judged_queries']:,}) | {figure(ndcg['vector'])} "
            f"| {figure(ndcg['bm25'])} | **{figure(ndcg['hybrid'])}** | {others} "
            f"| {row['measured']}, load {row['load']}, `{row['commit'][:7]}` |"
        )
    return "\n".join(lines) + "\n"


def readme_row(data: dict) -> str:
    """The README's headline row of hybrid relevance (three decimals)."""
    sets = ", ".join(
        f"{NAMES[row['dataset']]}{' ' + row['split'] if row['dataset'] == 'scifact' else ''} "
        f"{figure(row['ndcg@10']['hybrid'], 3)}"
        for row in data["sets"]
    )
    days = sorted({row["measured"][:10] for row in data["sets"]})
    loads = [float(bound) for row in data["sets"] for bound in row["load"].split("-")]
    return (
        f"| relevance: hybrid nDCG@10 | {sets} (`manage.py evaluate`, every judged query of each split; "
        f"[results](docs/benchmarks/results/relevance.json)) | {' to '.join(days[:1] + days[1:][-1:])}, "
        f"load {min(loads):g}-{max(loads):g} |"
    )


def _when(date_utc: str, loads: list[float]) -> str:
    return f"{date_utc[:10]} {date_utc[11:16]}, load {min(loads):.1f}-{max(loads):.1f}"


def speed_rows(latency: dict, ingestion: dict) -> list[str]:
    """The README's rows of latency, cache hit and throughput at 100k chunks (the run's "after" tree),
    and of ingestion (its first corpus: the default model and the first compared one)."""
    after, run = latency["latency"]["after"], latency["run"]
    when = _when(run["date_utc"], latency["loadavg_1m_during"])
    modes = ", ".join(
        f"`/{mode}` {after[mode]['client']['p50_ms']:.1f} ({after[mode]['client']['p95_ms']:.1f}) ms"
        for mode in ("hybrid", "vector", "bm25")
    )
    hit, throughput = latency["cache_hit"]["after"], latency["throughput"]["after"]
    served = ", ".join(f"`/{mode}` {throughput[mode]:.0f}" for mode in ("bm25", "vector", "hybrid"))
    corpus = next(iter(ingestion["runs"].values()))
    compared = corpus["compare_models"][0]
    seconds = sum(round_[f"I:{compared}_s"] for round_ in corpus["rounds_detail"])
    other = corpus["chunks"] * corpus["rounds"] / seconds
    ingested = _when(corpus["run"]["date_utc"], [block["loadavg_1m_before"] for block in corpus["blocks_detail"]])
    return [
        f"| latency over HTTP at 100k chunks, client p50 (p95) | {modes} | {when} |",
        f"| cache hit over HTTP at 100k chunks, client p50 (p95) | {hit['p50_ms']:.1f} ({hit['p95_ms']:.1f}) ms | {when} |",
        f"| throughput at 100k chunks, 4 clients | {served} requests/s | {when} |",
        (
            f"| ingestion end to end ({corpus['dataset']}, {corpus['chunks']} chunks) | "
            f"{corpus['summary']['ingest_chunks_per_s']:.1f} chunks/s ({corpus['model']}), {other:.1f} ({compared}) "
            f"| {ingested} |"
        ),
    ]


def test_the_readmes_speed_rows_are_the_results_files():
    rows = speed_rows(
        json.loads(LATENCY.read_text(encoding="utf-8")), json.loads(INGESTION.read_text(encoding="utf-8"))
    )
    shown = README.read_text(encoding="utf-8").splitlines()
    for row in rows:
        assert row in shown, row


def test_the_benchmarks_relevance_table_is_the_results_file():
    shown = TABLE.search(BENCHMARKS.read_text(encoding="utf-8"))
    assert shown, "docs/BENCHMARKS.md lost its relevance-table markers"
    assert shown.group(1) == relevance_table(results())


def test_the_readmes_headline_relevance_is_the_results_file():
    rows = [line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("| relevance: ")]
    assert rows == [readme_row(results())]


def test_the_results_ran_at_todays_defaults():
    """A default changed since the run: re-run the sets (the command is in each set's entry)."""
    from django.conf import settings

    from retrieval import tuning

    service = tuning.service_defaults("hybrid")
    today = {
        "fusion": service["fusion"],
        "leg_weights": service["leg_weights"],
        "leg_candidates": service["leg_candidates"],
        "candidates": settings.SEARCH_CANDIDATES,
        "weights": {leg: settings.SEARCH_WEIGHTS[leg] for leg in ("vector", "bm25")},
        "dense_weight_floor": settings.DENSE_WEIGHT_FLOOR,
        "chunk_size": settings.CHUNK_SIZE_TOKENS,
        "chunk_overlap": settings.CHUNK_OVERLAP_TOKENS,
        "embedding_model": settings.EMBEDDING_MODEL,
    }
    assert results()["defaults"] == today


def test_every_set_says_when_where_and_how():
    for row in results()["sets"]:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d-\d\d:\d\d", row["measured"]), row["dataset"]
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"]) and row["load"]
        assert row["command"].startswith("manage.py evaluate --dataset") and row["dataset"] in row["command"]


if __name__ == "__main__":
    import sys

    speed = speed_rows(
        json.loads(LATENCY.read_text(encoding="utf-8")), json.loads(INGESTION.read_text(encoding="utf-8"))
    )
    sys.stdout.write(relevance_table(results()) + "\n" + "\n".join([readme_row(results()), *speed]) + "\n")
