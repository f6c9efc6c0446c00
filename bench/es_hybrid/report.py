"""The two tables of docs/BENCHMARKS.md "Elasticsearch's hybrid as a peer", from a run's result."""

from __future__ import annotations

from typing import Any

LABELS = {
    "service_hybrid": "service hybrid",
    "es_sum": "ES query + knn",
    "es_rrf_client": "ES RRF in the client",
    "es_rrf_retriever": "ES rrf retriever",
}


def tables(result: dict[str, Any]) -> str:
    lines: list[str] = []
    rows = result.get("relevance") or []
    if rows:
        names = list(rows[0]["ndcg@10"])
        lines += [
            "| set | queries | " + " | ".join(LABELS.get(name, name) for name in names) + " |",
            "|---|---:|" + "---:|" * len(names),
        ]
        for row in rows:
            cells = " | ".join(f"{row['ndcg@10'].get(name, float('nan')):.4f}" for name in names)
            lines.append(f"| {row['set']} | {row['queries']:,} | {cells} |")
        lines.append("")
    scale = result.get("scale") or {}
    if scale.get("latency"):
        rps = (scale.get("throughput") or {}).get("rps", {})
        lines += [
            f"| at {scale['rows']:,} chunks, top {scale['top_k']} | p50 ms | p95 ms | req/s, {scale['clients']} clients |",
            "|---|---:|---:|---:|",
        ]
        for name, timing in scale["latency"].items():
            rate = f"{rps[name]:.1f}" if name in rps else "-"
            lines.append(f"| {LABELS.get(name, name)} | {timing['p50_ms']:.1f} | {timing['p95_ms']:.1f} | {rate} |")
    return "\n".join(lines)
