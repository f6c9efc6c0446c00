"""Latency of the per-KB fusion settings and document-aware ranking, in-process, interleaved.

    .venv/bin/python bench/document_ranking.py --kb scifact-all-minilm-l6-v2-f995db07 --queries 200

Needs a KB of the ``eval`` tenant that ``manage.py evaluate`` built (SciFact train by default: the KB
name is printed by evaluate). For each query, ``retrieval.services.search.search`` (uncached, what the
API calls) runs once per config, in an order rotated query by query so load drifts hit every config
alike; one untimed warm-up search first. Configs: hybrid as shipped (aggregate none: the document
stage does not run; fusion settings are resolved per search; RRF's per-query leg weights; each leg
ranking its own candidates), the legs scoring each other's heads (``leg_candidates`` union), RRF with
fixed leg weights, aggregate sum, aggregate sum with group_by document, the KB's own search settings
set ({"rrf_k": 60}: the resolution path with a KB value, same ranking). Reported: p50/p95 per config
and each p50's ratio to the shipped config's.
Writes bench/results/document_ranking-<date>.json. Restores the KB's search settings when done.
"""

from __future__ import annotations

import argparse
import time

import _common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", required=True, help="KB name in the eval tenant")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    _common.setup_django()

    from knowledge.knowledge_bases import update_search_settings
    from knowledge.models import KnowledgeBase
    from retrieval.services.search import search
    from retrieval.types import SearchRequest

    kb = KnowledgeBase.objects.select_related("tenant", "active_version").get(tenant__name="eval", name=args.kb)
    queries = [row["text"] for row in _common.read_jsonl(_common.DATASETS_DIR / args.dataset / "queries.jsonl")]
    queries = queries[: args.queries]
    configs = {
        "shipped (aggregate none)": {},
        "leg candidates union": {"leg_candidates": "union"},
        "leg weights fixed": {"leg_weights": "fixed"},
        "aggregate sum": {"aggregate": "sum"},
        "aggregate sum + group_by document": {"aggregate": "sum", "group_by": "document"},
        "KB search settings set": {"kb_settings": {"rrf_k": 60}},
    }
    saved = kb.search_settings
    timings: dict[str, list[float]] = {name: [] for name in configs}
    try:
        search(kb.tenant, SearchRequest(query=queries[0], kb_ids=[kb.pk]))
        names = list(configs)
        for i, query in enumerate(queries):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                options = dict(configs[name])
                update_search_settings(kb, options.pop("kb_settings", {}))
                started = time.perf_counter()
                search(kb.tenant, SearchRequest(query=query, kb_ids=[kb.pk], top_k=10, **options))
                timings[name].append(time.perf_counter() - started)
    finally:
        update_search_settings(kb, saved)
    baseline = _common.summarize_ms(timings[names[0]])["p50_ms"]
    rows, result = [], {"machine": _common.machine_info(), "kb": args.kb, "queries": len(queries), "configs": {}}
    for name in names:
        summary = _common.summarize_ms(timings[name])
        summary["p50_ratio"] = round(summary["p50_ms"] / baseline, 3)
        result["configs"][name] = summary
        rows.append([name, summary["p50_ms"], summary["p95_ms"], f"{summary['p50_ratio']:.3f}x"])
    headers = ["config", "p50 ms", "p95 ms", "p50 / shipped"]
    _common.print_table(headers, rows, title=f"{args.kb}, {len(queries)} queries")
    print(_common.write_result("document_ranking", result))


if __name__ == "__main__":
    main()
