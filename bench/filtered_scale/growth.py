"""The growth figures of ``bench.filtered_scale --growth``: ingestion end to end (parse, chunk,
embed, COPY with the HNSW index live, keyword index, graph) of the same SciFact documents into an empty
knowledge base and into the big tenant's (``bench.filtered_scale.report`` renders them with the HTTP
figures taken at a smaller size in the same run).

The documents and the model are the same both times, so the embedding's share is equal and what differs
is what the writes cost beside a large table, its HNSW index and its keyword index.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.harness import datasets


def write_documents(folder: Path, count: int) -> Path:
    """The first ``count`` SciFact passages as .txt files (about 2.4 chunks each at the default size)."""
    passages, _ = datasets.scifact_passages_and_queries()
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
