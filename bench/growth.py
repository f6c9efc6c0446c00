"""Issue 27's growth figures for bench/filtered_scale.py ``--growth``: ingestion end to end (parse, chunk,
embed, COPY with the HNSW index live, keyword index, graph) of the same SciFact documents into an empty
knowledge base and into the big tenant's, and the HTTP figures taken at a smaller size in the same run.

The documents and the model are the same both times, so the embedding's share is equal and what differs
is what the writes cost beside a large table, its HNSW index and its keyword index.
"""

from __future__ import annotations

import time
from pathlib import Path

import _common


def write_documents(folder: Path, count: int) -> Path:
    """The first ``count`` SciFact passages as .txt files (about 2.4 chunks each at the default size)."""
    passages, _ = _common.scifact_passages_and_queries()
    folder.mkdir(parents=True, exist_ok=True)
    for n, passage in enumerate(passages[:count]):
        (folder / f"growth-{n:05d}.txt").write_text(passage, encoding="utf-8")
    return folder


def ingest_rate(kb, folder: Path) -> dict:
    """``Ingester(kb).ingest`` of every file in ``folder``: chunks, wall and CPU seconds, chunks a second."""
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.models import Chunk

    rows_before = Chunk.objects.filter(knowledge_base=kb).count()
    files = discover_files([folder])
    cpu, wall = time.process_time(), time.perf_counter()
    report = Ingester(kb).ingest(files)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if report.failed:
        raise RuntimeError(f"growth ingestion failed: {report.failures[:3]}")
    return {
        "documents": len(files),
        "chunks": report.chunks,
        "rows_before": rows_before,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "chunks_per_s": round(report.chunks / wall, 1),
    }


def empty_rate(tenant, folder: Path) -> dict:
    """The rate into a new, empty KB of ``tenant``, which is deleted after (so it leaves no rows)."""
    from knowledge.knowledge_bases import create_knowledge_base, delete_knowledge_base

    kb = create_knowledge_base(tenant=tenant, name="growth-empty")
    try:
        return ingest_rate(kb, folder)
    finally:
        delete_knowledge_base(kb)


def render(growth: dict, modes: tuple[str, ...]) -> list[str]:
    """Markdown lines: the HTTP p50 at each size with the ratio to the smallest, and the two ingestion rates."""
    lines = []
    sizes = sorted(growth.get("http", {}), key=int)
    if sizes:
        base = growth["http"][sizes[0]]["scenarios"]
        headers = ["HTTP p50 (p95) ms", *(f"{int(s):,} rows" for s in sizes), f"ratio to {int(sizes[0]):,}"]
        rows = []
        for scenario in base:
            if scenario.split(" | ")[0] not in modes:
                continue
            cells = [growth["http"][s]["scenarios"].get(scenario) for s in sizes]
            rows.append(
                [
                    scenario.replace(" | ", ", "),
                    *(f"{c['p50_ms']:,.1f} ({c['p95_ms']:,.1f})" if c else "-" for c in cells),
                    f"{cells[-1]['p50_ms'] / cells[0]['p50_ms']:.2f}x" if cells[-1] and cells[0] else "-",
                ]
            )
        lines += ["Growth, the same run at each size (scenarios interleaved, result cache off):", ""]
        lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""]
    ingest = growth.get("ingest", {})
    if "empty" in ingest and "full" in ingest:
        empty, full = ingest["empty"], ingest["full"]
        lines += [
            (
                f"Ingestion end to end of the same {empty['documents']:,} documents ({empty['chunks']:,} chunks): "
                f"into an empty KB {empty['chunks_per_s']} chunks/s ({empty['wall_s']} s, CPU {empty['cpu_s']} s), "
                f"into the {full['rows_before']:,}-row KB {full['chunks_per_s']} chunks/s ({full['wall_s']} s, "
                f"CPU {full['cpu_s']} s): empty / big rate **{empty['chunks_per_s'] / full['chunks_per_s']:.2f}x**."
            ),
            "",
        ]
    return lines
