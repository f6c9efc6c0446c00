"""Two-way vs three-way hybrid search in-process on an evaluation KB, interleaved query by query: the
whole search's p50 / p95 and the graph leg's own, and what the graph leg found (query entities, passages).

    .venv/bin/python -m bench.graph.latency --kb scifact-all-minilm-l6-v2:onnx-5a582d78 --dataset scifact \
        --split train --queries 200
    .venv/bin/python -m bench.graph.latency ... --code var/before      # another checkout on the same KB
    .venv/bin/python -m bench.graph.latency ... --setting GRAPH_BRIDGE_SLOTS=0 --setting GRAPH_BRIDGE_PER_ENTITY=10

The KB is one ``manage.py evaluate`` built (it prints ``reusing knowledge base ...``); the queries are the
split's judged ones, in file order. Each query runs two-way (graph weight 0) and three-way (``"graph":
true``), and each ``--setting`` three-way with those settings, the order rotating from query to query,
after one untimed warm-up round of 10 queries.
Current figures: docs/BENCHMARKS.md, "Graph retrieval".
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from bench.harness import datasets, project, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", required=True, help="the evaluation KB's name")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="train")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--code", type=Path, default=None, help="import the project from this checkout")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help="one more three-way variant with these settings: NAME=INT[,NAME=INT] (e.g. GRAPH_BRIDGE_SLOTS=0)",
    )
    args = parser.parse_args()
    code = project.setup_django(args.code)
    from django.test import override_settings

    from knowledge.models import KnowledgeBase
    from retrieval.services.search import search
    from retrieval.types import SearchRequest

    print("load average:", os.getloadavg(), "code:", code)
    folder = datasets.DATASETS_DIR / args.dataset
    judged = {line.split("\t")[0] for line in (folder / "qrels" / f"{args.split}.tsv").read_text().splitlines()[1:]}
    queries = [row["text"] for row in datasets.read_jsonl(folder / "queries.jsonl") if row["_id"] in judged]
    queries = queries[: args.queries]
    kb = KnowledgeBase.objects.select_related("tenant").get(name=args.kb)
    variants = {"two-way": {"weights": {"graph": 0.0}}, "three-way": {"graph": True}}
    changes: dict[str, dict] = {}
    for text in args.setting:
        variants[f"three-way {text}"] = {"graph": True}
        changes[f"three-way {text}"] = {k: int(v) for k, v in (item.split("=", 1) for item in text.split(","))}

    def run(variant: str, query: str):
        request = SearchRequest(query=query, mode="hybrid", top_k=10, kb_ids=[kb.pk], **variants[variant])
        with override_settings(**changes.get(variant, {})):
            return search(kb.tenant, request)

    for query in queries[:10]:
        for variant in variants:
            run(variant, query)
    total: dict[str, list[float]] = {variant: [] for variant in variants}
    graph_ms: dict[str, list[float]] = {variant: [] for variant in variants if variant != "two-way"}
    passages = []
    for index, query in enumerate(queries):
        order = list(variants)[index % len(variants) :] + list(variants)[: index % len(variants)]
        for variant in order:
            response = run(variant, query)
            total[variant].append(response.timings_ms["total"] / 1000)
            if variant in graph_ms:
                graph_ms[variant].append(response.timings_ms["graph"] / 1000)
            if variant == "three-way":
                passages.append(response.candidates.get("graph", 0))
    for variant, seconds in total.items():
        summary = stats.summarize_ms(seconds)
        leg = f", graph leg p50 {stats.summarize_ms(graph_ms[variant])['p50_ms']} ms" if variant in graph_ms else ""
        print(f"{variant}: p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms over {len(seconds)} searches{leg}")
    ratio = statistics.median(total["three-way"]) / statistics.median(total["two-way"])
    graph = stats.summarize_ms(graph_ms["three-way"])
    print(
        f"three-way / two-way p50: {ratio:.2f}; graph leg p50 {graph['p50_ms']} ms, p95 {graph['p95_ms']} ms; "
        f"graph passages per query median {statistics.median(passages):.0f}, max {max(passages)}"
    )
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
