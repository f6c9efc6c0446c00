"""Fit the calibration of ``relevance`` (``retrieval.relevance_calibration``) on the raw scores
``bench.relevance_calibration.collect`` gathered, and write the before/after threshold figures per set.

The mapping is Platt's: ``P(judged relevant) = 1 / (1 + exp(-(slope * raw + intercept)))``, fitted by
Newton's method on the top-10 hybrid hits of every judged query of the five tuning splits, each set
weighing the same in the fit (no one set's size decides the scale). ``--after`` adds the figures
measured with the calibrated code (the same searches, the reported values), and checks nDCG@10.

Writes ``docs/benchmarks/results/relevance-calibration.json`` (the constants the code holds are that
file's: tests/retrieval/test_relevance_calibration.py).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from bench.harness.results import run_info

THRESHOLDS = [round(0.1 * step, 1) for step in range(1, 10)]
OUTPUT = Path("docs/benchmarks/results/relevance-calibration.json")
CHARTS = Path("docs/benchmarks/charts")


def fit_platt(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Weighted logistic regression of ``labels`` on ``scores`` (Newton's method; a tiny ridge keeps it
    finite on separable data)."""
    x = np.column_stack([scores, np.ones_like(scores)])
    theta = np.zeros(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x @ theta)))
        gradient = x.T @ (weights * (p - labels)) + 1e-6 * theta
        hessian = (x * (weights * p * (1 - p))[:, None]).T @ x + 1e-6 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(theta[0]), float(theta[1])


def calibrated(raw: np.ndarray, slope: float, intercept: float) -> np.ndarray:
    return np.where(raw <= 0.0, 0.0, 1.0 / (1.0 + np.exp(-(slope * raw + intercept))))


def figures(scores: np.ndarray, labels: np.ndarray) -> dict:
    """Relevant kept / others dropped at 0.1..0.9, the keep-90 % threshold, and at 0.5: relevant kept
    and precision (the share of hits at or above 0.5 that are judged relevant)."""
    relevant, others = scores[labels], scores[~labels]
    ordered = np.sort(relevant)[::-1]
    keep90 = float(ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)])
    above = scores >= 0.5
    return {
        "relevant_hits": int(len(relevant)),
        "other_hits": int(len(others)),
        "threshold_keeping_90": math.floor(keep90 * 1e4) / 1e4,
        "relevant_kept_at_0.5": round(float(np.mean(relevant >= 0.5)), 4),
        "precision_at_0.5": round(float(np.mean(labels[above])), 4) if above.any() else None,
        "curve": [
            {
                "threshold": t,
                "relevant_kept": round(float(np.mean(relevant >= t)), 4),
                "others_dropped": round(float(np.mean(others < t)), 4),
            }
            for t in THRESHOLDS
        ],
    }


def load(path: Path, mode: str) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    data = json.loads(path.read_text())
    out = {}
    for name, entry in data["sets"].items():
        hits = entry["modes"][mode]["hits"]
        out[name] = (
            np.array([score for score, _ in hits], dtype=float),
            np.array([judged for _, judged in hits], dtype=bool),
            entry["modes"][mode]["ndcg@10"],
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", type=Path, required=True, help="collect's output on the raw scale")
    parser.add_argument("--after", type=Path, help="collect's output with the calibrated code")
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    before = load(args.before, args.mode)
    scores = np.concatenate([s for s, _, _ in before.values()])
    labels = np.concatenate([lab for _, lab, _ in before.values()])
    weights = np.concatenate([np.full(len(s), 1.0 / len(s)) for s, _, _ in before.values()])
    slope, intercept = fit_platt(scores, labels.astype(float), weights * len(before))
    after = load(args.after, args.mode) if args.after else None
    sets = {}
    for name, (raw, judged, ndcg) in before.items():
        entry = {"ndcg@10_before": ndcg, "before": figures(raw, judged)}
        entry["after_mapped"] = figures(calibrated(raw, slope, intercept), judged)
        if after:
            a_scores, a_judged, a_ndcg = after[name]
            entry["ndcg@10_after"] = a_ndcg
            entry["after"] = figures(a_scores, a_judged)
        sets[name] = entry
    result = {
        "about": "The calibration of relevance: Platt's mapping of the raw score onto P(judged relevant), fitted "
        f"on the top-10 {args.mode} hits of every judged query of the shared sets' tuning splits (SciFact train, "
        "the dev splits of the others), each set weighing the same; before/after threshold figures per set. "
        "docs/BENCHMARKS.md, 'The relevance scale, calibrated'.",
        "run": run_info(),
        "mode": args.mode,
        "collected": {
            label: {key: json.loads(path.read_text())[key] for key in ("started", "finished")}
            | {"command": f".venv/bin/python -m bench.relevance_calibration.collect --output {path}"}
            for label, path in (("before", args.before), ("after", args.after))
            if path
        },
        "mapping": {
            "form": "1 / (1 + exp(-(slope * raw + intercept))), 0 for raw 0",
            "slope": round(slope, 4),
            "intercept": round(intercept, 4),
            "raw_at_0.5": round(-intercept / slope, 4),
        },
        "sets": sets,
    }
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["mapping"]))
    for name, entry in sets.items():
        b, m = entry["before"], entry.get("after", entry["after_mapped"])
        print(
            f"{name:9} keep90 {b['threshold_keeping_90']:.4f} -> {m['threshold_keeping_90']:.4f}  "
            f"kept@0.5 {b['relevant_kept_at_0.5']:.3f} -> {m['relevant_kept_at_0.5']:.3f}  "
            f"prec@0.5 {b['precision_at_0.5']} -> {m['precision_at_0.5']}  "
            f"ndcg {entry['ndcg@10_before']} -> {entry.get('ndcg@10_after')}"
        )
    print(markdown(result))
    for name, entry in sets.items():
        CHARTS.mkdir(parents=True, exist_ok=True)
        (CHARTS / f"relevance-calibration-{name}.svg").write_text(chart(name, entry) + "\n")


NAMES = {"scifact": "SciFact", "xquad-en": "XQuAD-en", "xquad-zh": "XQuAD-zh", "cmrc2018": "CMRC 2018", "drcd": "DRCD"}


def markdown(result: dict) -> str:
    """The two tables of docs/BENCHMARKS.md, "The relevance scale, calibrated"."""
    lines = [
        (
            "| set (split, relevant / other top-10 hits) | keep-90 % threshold | relevant kept at 0.5 "
            "| precision at ≥ 0.5 | hybrid nDCG@10 |"
        ),
        "|---|---:|---:|---:|---:|",
    ]
    for name, entry in result["sets"].items():
        b, a = entry["before"], entry.get("after", entry["after_mapped"])
        lines.append(
            f"| {NAMES[name]} ({'train' if name == 'scifact' else 'dev'}, {b['relevant_hits']:,} / {b['other_hits']:,}) "
            f"| {b['threshold_keeping_90']:.4f} → {a['threshold_keeping_90']:.4f} "
            f"| {b['relevant_kept_at_0.5']:.3f} → {a['relevant_kept_at_0.5']:.3f} "
            f"| {b['precision_at_0.5']:.3f} → {a['precision_at_0.5']:.3f} "
            f"| {entry['ndcg@10_before']:.4f} → {entry.get('ndcg@10_after', float('nan')):.4f} |"
        )
    lines += [
        "",
        "| set, scale | " + " | ".join(f"{t}" for t in THRESHOLDS) + " |",
        "|---|" + "---:|" * len(THRESHOLDS),
    ]
    for name, entry in result["sets"].items():
        for label, key in (("raw", "before"), ("calibrated", "after" if "after" in entry else "after_mapped")):
            cells = [f"{p['relevant_kept']:.2f} / {p['others_dropped']:.2f}" for p in entry[key]["curve"]]
            lines.append(f"| {NAMES[name]}, {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(name: str, entry: dict) -> str:
    """One set's threshold curves, raw and calibrated, as the console draws its charts (``core.charts``)."""
    from core.charts import Series, line_chart

    after = entry.get("after", entry["after_mapped"])

    def series(label: str, figures: dict, key: str) -> Series:
        return Series(label, [(p["threshold"], p[key]) for p in figures["curve"]])

    return str(
        line_chart(
            [
                series("relevant kept, raw", entry["before"], "relevant_kept"),
                series("others dropped, raw", entry["before"], "others_dropped"),
                series("relevant kept, calibrated", after, "relevant_kept"),
                series("others dropped, calibrated", after, "others_dropped"),
            ],
            chart_id=f"relevance-calibration-{name}",
            title=f"{NAMES[name]}: top-10 hits a relevance threshold keeps and drops, raw and calibrated",
            x_label=f"{NAMES[name]}: relevance threshold",
            x_ticks=[(t, str(t)) for t in THRESHOLDS],
            marker=(0.5, "0.5"),
        )
    )


if __name__ == "__main__":
    main()
