"""Graph retrieval on the sample KB: extraction's share of ingestion, graph leg latency, and recall@10
of two-way vs three-way hybrid on a small multi-hop set (questions whose answer document is named
only through an entity one or two hops from the question's entities).

    .venv/bin/python -m bench.graph.multihop

Ingests ``sample_kb/`` into a fresh tenant (removed afterwards); results: docs/BENCHMARKS.md,
"Graph retrieval".
``GRAPH_FUSION_HEAD=0 .venv/bin/python -m bench.graph.multihop`` measures three-way hybrid without the graph gate.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.harness import project, results, stats

# question -> the document that answers it (its file name); built by hand from sample_kb/
MULTI_HOP = {
    "Which restaurant in the partner program serves 鱼香肉丝?": "restaurant-partner-program.html",
    "What discount do partners get on the air monitor used by the kitchen that serves 鱼香肉丝?":
        "restaurant-partner-program.html",
    "How do I pair the gateway that arms the PPR-9087 when I leave home?": "sky-10023908-hub-pro.md",
    "What error codes can the AirSense monitor in 蜀香小馆's kitchen show?": "error-codes.html",
    "How should the battery pack of the PortaLock Pro be stored?": "safety-datasheet-ppr-9087-battery.pdf",
    "What warranty does the gateway that works with the PortaLock Pro have?": "warranty-policy.md",
}  # fmt: skip
LATENCY_QUERIES = [
    "PPR-9087", "鱼香肉丝", "SKY-30452 air monitor", "Skyline Home warranty", "蜀香小馆的招牌菜",
    "firmware update E-221", "退货政策", "Which battery pack does the PPR-9087 use?",
]  # fmt: skip
REPEATS = 20
GRAPH_WEIGHTS = (0.3, 1.0, 2.0)  # besides the default (SEARCH_WEIGHT_GRAPH_HYBRID) that "graph": true takes


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    project.setup_django()
    from django.conf import settings

    from graph.extraction import entity_extractor_for_tenant
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base, delete_tenant
    from knowledge.models import Chunk
    from retrieval.services.search import search
    from retrieval.types import SearchRequest
    from tenants.services import create_tenant

    print("load average:", os.getloadavg())
    tenant = create_tenant(results.unique_name("bench-graph"))
    try:
        kb = create_knowledge_base(tenant=tenant, name="sample")
        report = Ingester(kb).ingest(discover_files([Path("sample_kb")]))
        texts = list(Chunk.objects.filter(kb_version=kb.active_version).values_list("content", flat=True))
        extractor = entity_extractor_for_tenant(tenant.pk)
        extractor.extract("warm-up 鱼香肉丝")  # jieba's POS tables load once per process
        started = time.perf_counter()
        for text in texts:
            extractor.extract(text)
        extraction_s = time.perf_counter() - started
        print(f"ingestion: {report.chunks} chunks in {report.seconds:.2f} s; extraction alone {extraction_s:.3f} s "
              f"= {1000 * extraction_s / len(texts):.2f} s per 1,000 chunks, {100 * extraction_s / report.seconds:.1f} %"
              " of ingestion")  # fmt: skip

        seconds = []
        for _ in range(REPEATS):
            for query in LATENCY_QUERIES:
                response = search(tenant, SearchRequest(query=query, mode="graph", top_k=10))
                seconds.append(response.timings_ms["graph"] / 1000)
        summary = stats.summarize_ms(seconds)
        print(f"graph leg over {len(seconds)} searches: p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms")

        default = f"three-way (graph weight {settings.SEARCH_WEIGHT_GRAPH_HYBRID})"
        variants = [("two-way", {}), (default, {"graph": True})]
        variants += [(f"three-way, graph weight {w}", {"weights": {"graph": w}}) for w in GRAPH_WEIGHTS]
        variants += [("graph alone", {"mode": "graph"})]
        for label, extra in variants:
            ranks = []
            for question, answer in MULTI_HOP.items():
                request = SearchRequest(query=question, **{"mode": "hybrid", "top_k": 10, **extra})
                names = [Path(hit.source_uri).name for hit in search(tenant, request).results]
                ranks.append(names.index(answer) + 1 if answer in names else None)
            found = sum(rank is not None for rank in ranks)
            shown = ["-" if rank is None else rank for rank in ranks]
            recall = f"{found}/{len(MULTI_HOP)} = {found / len(MULTI_HOP):.3f}"
            print(f"multi-hop recall@10 ({label}): {recall}; ranks {shown}")
    finally:
        delete_tenant(tenant)
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
