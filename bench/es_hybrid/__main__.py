"""Elasticsearch's own hybrid search beside the service's default hybrid, in one run: nDCG@10 on the
shared sets, p50/p95 over HTTP and requests per second with 4 clients at 100k chunks.

    .venv/bin/python -m bench.es_hybrid                               # the full run (about an hour)
    .venv/bin/python -m bench.es_hybrid --limit 20 --corpus-limit 300 --rows 2000 --requests 20 --throughput-s 8

Elasticsearch indexes the same chunks (their text analyzed by the service's analyzer, as the keyword index
holds it) with their stored MiniLM vectors in a ``dense_vector`` field, and is called by the Python client,
the query embedded in this process by the same model inside the timed part. Its hybrid forms
(``bench.es_hybrid.es``): a ``query`` plus ``knn`` in one search (scores summed), and an RRF of its BM25
and kNN rankings computed by the client (rank constant 60, window = size, the ``rrf`` retriever's
defaults); the ``rrf`` retriever itself runs only where the node has x-pack's ``rank-rrf`` (``--es URL``
of such a node); the tests' node (Maven's ``integ-test-zip``, no x-pack) has not, and the result says why.

Relevance uses the evaluation KBs of ``manage.py evaluate`` (ingested when missing; ``--corpus-limit``
makes a small KB of its own for a smoke run). Without ``--es`` the tests' Elasticsearch node is started
(tests/servers) and stopped after. Cleanup (always): the bench tenant and rows, the Elasticsearch indexes,
gunicorn. Writes bench/results/es_hybrid-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.es_hybrid import report
from bench.es_hybrid.es import FORMS
from bench.harness import project, results

DEFAULT_SETS = "scifact:train,xquad-en:dev"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--es", default="", help="an Elasticsearch URL (default: start the tests' node)")
    parser.add_argument("--parts", default="relevance,latency", help="relevance, latency or both")
    parser.add_argument("--datasets", default=DEFAULT_SETS, help="NAME:SPLIT,... of the shared sets")
    parser.add_argument("--limit", type=int, default=0, help="judged queries per set (0: all)")
    parser.add_argument("--corpus-limit", type=int, default=0, help="a smoke run's corpus size (0: the whole corpus)")
    parser.add_argument("--rows", type=int, default=100_000, help="chunks of the latency part")
    parser.add_argument("--docs", type=int, default=1000, help="documents the rows are spread over")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--requests", type=int, default=300, help="timed sequential queries per scenario")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--throughput-s", type=float, default=60, help="seconds of 4-client load per scenario (0: skip)"
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="the service's gunicorn workers")
    parser.add_argument("--threads", type=int, default=4, help="WEB_THREADS of each worker")
    parser.add_argument("--window", type=int, default=0, help="Elasticsearch's per-leg depth (0: the size)")
    parser.add_argument("--num-candidates", type=int, default=100, help="kNN num_candidates (at least k)")
    parser.add_argument(
        "--vector-index", default="hnsw", choices=("hnsw", "int8_hnsw"),
        help="dense_vector index_options type (hnsw: float vectors, as pgvector's HNSW)",
    )  # fmt: skip
    results.add_wait_quiet(parser)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    project.setup_django()
    import logging

    from elasticsearch import Elasticsearch

    logging.getLogger("elastic_transport").setLevel(logging.WARNING)  # a line per request otherwise

    from tests.servers import elasticsearch

    node = None
    url = args.es
    if not url:
        node, url = elasticsearch.start("bench-es-hybrid")
    result: dict[str, Any] = {"config": vars(args), "machine": results.machine_info()}
    try:
        client = Elasticsearch(url, request_timeout=60)
        # The test distribution answers no GET / (its main action is missing): the version from the nodes API.
        nodes = client.nodes.info(filter_path="nodes.*.version,nodes.*.build_flavor,nodes.*.modules.name")["nodes"]
        node_info = next(iter(nodes.values()))
        modules = sorted(module["name"] for module in node_info.get("modules", []))
        result["elasticsearch"] = {
            "version": node_info["version"],
            "build_flavor": node_info.get("build_flavor"),
            "x_pack_modules": [name for name in modules if name.startswith("x-pack")],
        }
        forms = [form for form in FORMS if form != "es_rrf_retriever"]
        missing = rrf_retriever_missing(client)
        result["elasticsearch"]["rrf_retriever"] = missing or "available"
        if not missing:
            forms.append("es_rrf_retriever")
        print(f"Elasticsearch {result['elasticsearch']}; forms: {', '.join(forms)}", flush=True)
        parts = args.parts.split(",")
        if "relevance" in parts:
            from bench.es_hybrid import relevance

            result["relevance"] = []
            for name, split in (item.split(":") for item in args.datasets.split(",")):
                row = relevance.compare(
                    name, split, client, forms, limit=args.limit, corpus_limit=args.corpus_limit,
                    vector_index=args.vector_index, num_candidates=args.num_candidates,
                )  # fmt: skip
                result["relevance"].append(row)
                print(json.dumps(row), flush=True)
        if "latency" in parts:
            from bench.es_hybrid import latency

            result["loadavg_1m_before_latency"] = round(results.wait_for_quiet(args.wait_quiet), 2)
            result["scale"] = latency.measure(client, forms, args)
            print(json.dumps(result["scale"], indent=1), flush=True)
    finally:
        if node is not None:
            node.stop()
        print(report.tables(result))
        print(f"wrote {results.write_result('es_hybrid', result)}")
    return 0


def rrf_retriever_missing(client: Any) -> str:
    """Empty when the node runs the ``rrf`` retriever; else its answer to one (on a throwaway index)."""
    from bench.es_hybrid.es import EsHybrid, build_index

    class Zero:
        def embed_query(self, text: str) -> list[float]:
            return [1.0, 0.0]

    class Split:
        def tokens(self, text: str) -> list[str]:
            return text.split()

    build_index(client, "bench-es-hybrid-probe", [], 2, "hnsw")
    try:
        return EsHybrid(client, "bench-es-hybrid-probe", Zero(), Split(), num_candidates=10).rrf_retriever_available()
    finally:
        client.options(ignore_status=404).indices.delete(index="bench-es-hybrid-probe")


if __name__ == "__main__":
    sys.exit(main())
