"""The semantic cache's threshold: hit rate on paraphrases, false hits on near misses, and the latency of
a semantic hit against an exact hit and a miss, in one run. Results: docs/BENCHMARKS.md, "The semantic
cache"; the decision: docs/benchmarks/decisions.md, "The semantic cache's threshold".

    LC_ALL=C.UTF-8 .venv/bin/python -m bench.semantic_cache [--pairs 40] [--threshold 0.9] [--repeat 1]

Sets: hand-written paraphrase pairs over the sample KB's topics (``bench/semantic_cache/paraphrases.jsonl``,
English and Chinese), pairs of questions the shared datasets judge against the same passage (XQuAD-en
and CMRC 2018 dev: different questions, one answer passage; ``--pairs`` of each), and near misses (the
same words, another order number, product or error code, date, number or protected term:
``near_misses.jsonl``). Each query is embedded by the KB's model (the default MiniLM); per threshold
a pair hits when its cosine reaches it and (but for the "cosine only" column) the exact tokens agree;
a cross hit is a query whose nearest cached query, among every first query of its set, is another
pair's. The end-to-end part ingests ``sample_kb`` into a throwaway tenant with the semantic cache on,
then per pair searches the first query (a miss), the second (a semantic hit, or a miss) and the second
again (an exact hit) through ``retrieval.cache.cached_search`` (hybrid, top 5), at ``--threshold``.
Writes bench/results/semantic_cache-<date>.json; the tenant is deleted at the end.
"""

from __future__ import annotations

import argparse
import io
import time
from collections import defaultdict
from pathlib import Path

from bench.harness import datasets, project, results, stats, tables, throwaway

HERE = Path(__file__).resolve().parent  # the paraphrase and near-miss sets beside this module
THRESHOLDS = (0.80, 0.84, 0.86, 0.88, 0.90, 0.92, 0.94, 0.96)
PROTECTED = ("GuardCam", "AirSense", "HubPro", "LockMate")  # the near misses' product names


def dataset_pairs(name: str, split: str, count: int) -> list[dict]:
    """The first two questions of each of the first ``count`` passages judged by two or more."""
    queries = {row["_id"]: row["text"] for row in datasets.read_jsonl(datasets.DATASETS_DIR / name / "queries.jsonl")}
    by_passage: dict[str, list[str]] = defaultdict(list)
    lines = (datasets.DATASETS_DIR / name / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]
    for line in lines:
        query_id, corpus_id, _ = line.split("\t")
        by_passage[corpus_id].append(query_id)
    pairs = [{"a": queries[ids[0]], "b": queries[ids[1]]} for ids in by_passage.values() if len(ids) >= 2]
    return pairs[:count]


def offline(sets: dict[str, list[dict]], embedder, analyzer, languages) -> dict:
    """Per set and threshold: own hits (cosine and signature), cosine-only hits, cross hits."""
    from engines.analysis import detect_language
    from retrieval.query_signature import signature

    report = {}
    for name, pairs in sets.items():
        firsts = embedder.embed_queries([pair["a"] for pair in pairs])
        seconds = embedder.embed_queries([pair["b"] for pair in pairs])
        cosines = seconds @ firsts.T  # unit vectors
        sig_a = [signature(pair["a"], analyzer) for pair in pairs]
        sig_b = [signature(pair["b"], analyzer) for pair in pairs]
        served = [not languages or detect_language(pair["b"]) in languages for pair in pairs]
        rows = {}
        for threshold in THRESHOLDS:
            own = cosine_only = cross = 0
            for i in range(len(pairs)):
                cosine_only += cosines[i, i] >= threshold
                same = [j for j in range(len(pairs)) if sig_a[j] == sig_b[i]]
                if not same or not served[i]:
                    continue
                nearest = max(same, key=lambda j: cosines[i, j])
                if cosines[i, nearest] >= threshold:
                    own += nearest == i
                    cross += nearest != i
            rows[f"{threshold:.2f}"] = {
                "hit": round(own / len(pairs), 3),
                "cosine_only": round(cosine_only / len(pairs), 3),
                "cross": round(cross / len(pairs), 3),
            }
        diagonal = [float(cosines[i, i]) for i in range(len(pairs))]
        report[name] = {
            "pairs": len(pairs),
            "served": sum(served),
            "cosine_median": round(sorted(diagonal)[len(diagonal) // 2], 3),
            "thresholds": rows,
        }
    return report


def end_to_end(tenant, sets: dict[str, list[dict]], threshold: float, repeat: int) -> dict:
    from django.conf import settings

    from retrieval.cache import cached_search
    from retrieval.types import SearchRequest

    settings.SEMANTIC_CACHE_MIN_COSINE = threshold
    timings: dict[str, list[float]] = defaultdict(list)
    outcomes: dict[str, dict[str, int]] = {}
    for name, pairs in sets.items():
        counts = {"semantic_own": 0, "semantic_other": 0, "miss": 0}
        for pair in pairs:
            for query, role in ((pair["a"], "first"), (pair["b"], "second"), (pair["b"], "again")):
                for _ in range(repeat if role == "again" else 1):
                    started = time.perf_counter()
                    outcome = cached_search(tenant, SearchRequest(query=query, top_k=5), logged=False)
                    elapsed = time.perf_counter() - started
                    kind = {False: "miss", True: "exact", "semantic": "semantic"}[outcome.cached]
                    timings[kind].append(elapsed)
                    if role == "second":
                        if kind == "semantic":
                            counts["semantic_own" if outcome.semantic.query == pair["a"] else "semantic_other"] += 1
                        else:
                            counts["miss"] += 1
        outcomes[name] = counts
    return {
        "threshold": threshold,
        "outcomes": outcomes,
        "latency_ms": {kind: stats.summarize_ms(values) for kind, values in timings.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=40, help="pairs of each shared dataset")
    parser.add_argument("--threshold", type=float, default=None, help="end to end (default: the setting)")
    parser.add_argument("--repeat", type=int, default=1, help="exact hits per second query")
    args = parser.parse_args()
    project.setup_django()
    from django.conf import settings
    from django.core.management import call_command

    from knowledge.knowledge_bases import update_search_settings
    from knowledge.models import DictionaryTerm, KnowledgeBase
    from knowledge.selectors.search import analyzer_for_tenant
    from tenants.services import create_tenant

    sets = {
        "paraphrase en": [row for row in datasets.read_jsonl(HERE / "paraphrases.jsonl") if row["lang"] == "en"],
        "paraphrase zh": [row for row in datasets.read_jsonl(HERE / "paraphrases.jsonl") if row["lang"] == "zh"],
        "same passage xquad-en": dataset_pairs("xquad-en", "dev", args.pairs),
        "same passage cmrc2018": dataset_pairs("cmrc2018", "dev", args.pairs),
        "near miss": datasets.read_jsonl(HERE / "near_misses.jsonl"),
    }
    prefix = "bench-semantic-cache"
    tenant = create_tenant(results.unique_name(prefix))
    result: dict = {"machine": results.machine_info(), "loadavg_at_start": [round(x, 2) for x in _loadavg()]}
    try:
        DictionaryTerm.objects.bulk_create([DictionaryTerm(tenant=tenant, value=term) for term in PROTECTED])
        call_command("ingest", "sample_kb", tenant=tenant.name, kb="sample", no_progress=True, stdout=io.StringIO())
        kb = KnowledgeBase.objects.get(tenant=tenant, name="sample")
        update_search_settings(kb, {"semantic_cache": True})
        from engines.embedders import get_embedder

        embedder = get_embedder(kb.embedding_model)
        result["model"] = kb.embedding_model
        result["offline"] = offline(sets, embedder, analyzer_for_tenant(tenant.pk), tuple(kb.languages or ()))
        threshold = args.threshold if args.threshold is not None else settings.SEMANTIC_CACHE_MIN_COSINE
        tenant.refresh_from_db()
        result["end_to_end"] = end_to_end(tenant, sets, threshold, args.repeat)
    finally:
        throwaway.clean_up(result, tenant, None, tenant_prefix=prefix)
    _print(result)
    print(results.write_result("semantic_cache", result))


def _loadavg() -> tuple[float, ...]:
    import os

    return os.getloadavg()


def _print(result: dict) -> None:
    for name, data in result["offline"].items():
        rows = [[t, r["hit"], r["cosine_only"], r["cross"]] for t, r in data["thresholds"].items()]
        title = f"{name}: {data['pairs']} pairs, {data['served']} in a language the model covers, median cosine {data['cosine_median']}"
        tables.print_table(["threshold", "hit", "cosine only", "cross hit"], rows, title=title)
    e2e = result["end_to_end"]
    rows = [[name, *counts.values()] for name, counts in e2e["outcomes"].items()]
    tables.print_table(
        ["set", "semantic (own)", "semantic (other)", "miss"], rows, title=f"end to end at {e2e['threshold']}"
    )
    rows = [[kind, s.get("n"), s.get("p50_ms"), s.get("p95_ms")] for kind, s in e2e["latency_ms"].items()]
    tables.print_table(["outcome", "n", "p50 ms", "p95 ms"], rows, title="latency (cached_search, in process)")


if __name__ == "__main__":
    main()
