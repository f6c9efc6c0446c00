"""A leg's query variants searched beside each other vs one after another, in one process, interleaved
query by query so both share the machine's load (issue 30 item 6; ``retrieval.services.pools``).

    LC_ALL=C.UTF-8 .venv/bin/python bench/variants.py --rounds 50

A throwaway tenant gets the sample KB and synonym rules that give each query three variants; each
round searches every query once each way (uncached ``search()``), sequential by replacing the legs'
``per_variant`` with a plain loop. Reports the median and p95 per mode and way. Cleanup: the tenant is
deleted. Writes bench/results/variants-<date>.json.
"""

from __future__ import annotations

import argparse
import time

import _common

QUERIES = [
    "how hot may the charger get",
    "can I return the charger",
    "charger storage temperature",
    "what does the charger warranty cover",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--modes", default="hybrid,vector,bm25")
    args = parser.parse_args()
    _common.setup_django()

    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.models import Synonym
    from retrieval.expansion import ExpansionOptions
    from retrieval.services import bm25_leg, vector_leg
    from retrieval.services.search import search
    from retrieval.types import SearchRequest
    from tenants.services import create_tenant

    prefix = "bench-variants"
    tenant = create_tenant(_common.unique_name(prefix))
    result: dict = {"machine": _common.machine_info(), "rounds": args.rounds}
    try:
        kb = create_knowledge_base(tenant=tenant, name="sample")
        Ingester(kb).ingest(discover_files([_common.REPO_ROOT / "sample_kb"]))
        Synonym.objects.create(
            tenant=tenant, kind=Synonym.Kind.EXPLICIT, terms=["charger"], replacements=["battery pack", "power adapter"]
        )
        concurrent = bm25_leg.per_variant

        def sequential(function, items, *, database):
            return [function(item) for item in items]

        ways = {"beside": concurrent, "one_after_another": sequential}
        times: dict[str, dict[str, list[float]]] = {}
        for mode in args.modes.split(","):
            request = SearchRequest(query=QUERIES[0], mode=mode, top_k=10, expand=ExpansionOptions(synonyms=True))
            assert len(search(tenant, request).queries) == 3, "each query should have three variants"
            for _ in range(args.rounds):
                for query in QUERIES:
                    request = SearchRequest(query=query, mode=mode, top_k=10, expand=ExpansionOptions(synonyms=True))
                    for way, runner in ways.items():
                        bm25_leg.per_variant = vector_leg.per_variant = runner
                        started = time.perf_counter()
                        search(tenant, request)
                        times.setdefault(mode, {}).setdefault(way, []).append(time.perf_counter() - started)
            bm25_leg.per_variant = vector_leg.per_variant = concurrent
        result["ms"] = {
            mode: {way: _common.summarize_ms(s) for way, s in by_way.items()} for mode, by_way in times.items()
        }
        rows = [
            [mode, way, summary["p50_ms"], summary["p95_ms"]]
            for mode, by_way in result["ms"].items()
            for way, summary in by_way.items()
        ]
        _common.print_table(["mode", "variants", "p50 ms", "p95 ms"], rows, title="search() with three variants")
    finally:
        _common.clean_up(result, tenant, None, tenant_prefix=prefix)
    print(_common.write_result("variants", result))


if __name__ == "__main__":
    main()
