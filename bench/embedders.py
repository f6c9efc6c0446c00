"""Query latency, passages/s and agreement of the embedding runtimes, interleaved in one process.

    .venv/bin/python -m bench.embedders                       # torch vs ONNX fp32 vs ONNX int8, 1 thread
    .venv/bin/python -m bench.embedders --threads 2 --queries 300 --batches 20
    .venv/bin/python -m bench.embedders --graphs-from before=/tmp/before-onnx/<hash>   # + another checkout's graphs

Loads all-MiniLM-L6-v2 three times (``:torch``, ``:onnx``, ``:onnx-int8``) with the same thread count
(TORCH_THREADS = ONNX_THREADS = --threads), warms each up, then:
  - query latency: each SciFact query is embedded by every runtime in an order that rotates from
    query to query (so a burst of load from other processes hits all alike); median and p95;
  - passages/s at batch 32: each batch of 32 SciFact passages (title + text) goes through every
    runtime, rotating likewise;
  - cosine of each runtime's vectors to torch's (min / mean over the queries and the passages).
``--graphs-from NAME=DIR`` adds ``onnx@NAME`` and ``onnx-int8@NAME``: this checkout's ONNX embedder
(tokenizer, pooling, session options) running the ``model-fp32.onnx`` / ``model-int8.onnx`` another
checkout exported into DIR (its ``exported_model``), so old and new graphs are timed in one run.
Writes bench/results/embedders-<date>.json and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

from bench.harness import datasets, project, results, stats, tables

RUNTIMES = ["torch", "onnx", "onnx-int8"]
BATCH = 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every runtime (default 1)")
    parser.add_argument("--queries", type=int, default=200, help="SciFact queries timed per runtime")
    parser.add_argument("--batches", type=int, default=12, help="batches of 32 passages timed per runtime")
    parser.add_argument("--graphs-from", metavar="NAME=DIR", help="also time the ONNX graphs another checkout exported")
    args = parser.parse_args()
    os.environ["TORCH_THREADS"] = os.environ["ONNX_THREADS"] = str(args.threads)
    project.setup_django()
    import numpy as np

    from engines.embedders import get_embedder

    passages, queries = datasets.scifact_passages_and_queries()
    queries = queries[: args.queries]
    batches = [passages[i * BATCH : (i + 1) * BATCH] for i in range(args.batches)]
    result: dict = {"machine": results.machine_info(), "threads": args.threads, "loadavg_at_start": os.getloadavg()}
    embedders = {}
    for runtime in RUNTIMES:
        started = time.perf_counter()
        embedders[runtime] = get_embedder(f"all-MiniLM-L6-v2:{runtime}")
        embedders[runtime].embed_documents(batches[0])  # warm-up: kernels, allocator
        result.setdefault("load_s", {})[runtime] = round(time.perf_counter() - started, 2)
    if args.graphs_from:
        name, folder = args.graphs_from.split("=", 1)
        for runtime, precision in (("onnx", "fp32"), ("onnx-int8", "int8")):
            embedder = _with_graph(embedders[runtime], Path(folder) / f"model-{precision}.onnx")
            embedder.embed_documents(batches[0])
            embedders[f"{runtime}@{name}"] = embedder
        result["graphs_from"] = {name: folder}
    runtimes = list(embedders)

    query_s = {runtime: [] for runtime in runtimes}
    query_vectors = {runtime: [] for runtime in runtimes}
    for i, query in enumerate(queries):
        for runtime in runtimes[i % len(runtimes) :] + runtimes[: i % len(runtimes)]:
            started = time.perf_counter()
            vector = embedders[runtime].embed_query(query)
            query_s[runtime].append(time.perf_counter() - started)
            query_vectors[runtime].append(vector)
    batch_s = dict.fromkeys(runtimes, 0.0)
    passage_vectors = {runtime: [] for runtime in runtimes}
    for i, batch in enumerate(batches):
        for runtime in runtimes[i % len(runtimes) :] + runtimes[: i % len(runtimes)]:
            started = time.perf_counter()
            passage_vectors[runtime].append(embedders[runtime].embed_documents(batch))
            batch_s[runtime] += time.perf_counter() - started

    rows = []
    for runtime in runtimes:
        latency = stats.summarize_ms(query_s[runtime])
        cosine_queries = np.sum(np.vstack(query_vectors[runtime]) * np.vstack(query_vectors["torch"]), axis=1)
        cosine_passages = np.sum(np.vstack(passage_vectors[runtime]) * np.vstack(passage_vectors["torch"]), axis=1)
        summary = {
            "query": latency,
            "passages_per_s": round(BATCH * len(batches) / batch_s[runtime], 1),
            "cosine_to_torch_queries_min_mean": [float(cosine_queries.min()), float(cosine_queries.mean())],
            "cosine_to_torch_passages_min_mean": [float(cosine_passages.min()), float(cosine_passages.mean())],
        }
        result[runtime] = summary
        rows.append(
            [
                runtime,
                latency["p50_ms"],
                latency["p95_ms"],
                summary["passages_per_s"],
                f"{statistics.median(query_s['torch']) / statistics.median(query_s[runtime]):.2f}x",
                f"{cosine_queries.min():.6f} / {cosine_queries.mean():.6f}",
                f"{cosine_passages.min():.6f} / {cosine_passages.mean():.6f}",
            ]
        )
    result["loadavg_at_end"] = os.getloadavg()
    tables.print_table(
        [
            "runtime",
            "query p50 ms",
            "p95 ms",
            "passages/s (batch 32)",
            "query speed-up",
            "cosine to torch, queries min / mean",
            "passages min / mean",
        ],
        rows,
        title=(
            f"all-MiniLM-L6-v2, {args.threads} thread(s), {len(queries)} queries, {len(batches)} batches of 32; "
            f"load {result['loadavg_at_start'][0]:.2f} -> {result['loadavg_at_end'][0]:.2f}"
        ),
    )
    print(f"\nwrote {results.write_result('embedders', result, key=f'threads-{args.threads}')}")
    return 0


def _with_graph(embedder, graph: Path):
    """The same embedder running another graph file, with the same session options."""
    import onnxruntime

    other = copy.copy(embedder)
    other._session = onnxruntime.InferenceSession(
        str(graph), embedder._session.get_session_options(), providers=["CPUExecutionProvider"]
    )
    return other


if __name__ == "__main__":
    sys.exit(main())
