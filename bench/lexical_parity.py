"""BM25 on tantivy against BM25 on Elasticsearch, the same analyzer pipeline feeding both: nDCG@10
per shared evaluation set and the share of queries whose top 10 is identical (same ids, same order).

Each corpus document is analyzed once by the service's analyzer (``engines.analysis``) and written, as
one entry, to a tantivy index and to an index on a real Elasticsearch node; each judged query's
tokens are searched in both. No embedding, no fusion: the engines alone.

    .venv/bin/python -m bench.lexical_parity [--datasets scifact:train,xquad-en:dev,...] [--es URL]

Without ``--es`` it starts the tests' Elasticsearch node (tests/servers) and stops it after."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import datasets, project, results

DEFAULT_SETS = "scifact:train,xquad-en:dev,xquad-zh:dev,cmrc2018:dev,drcd:dev"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=DEFAULT_SETS)
    parser.add_argument("--es", default="", help="an Elasticsearch URL (default: start the tests' node)")
    args = parser.parse_args()
    project.setup_django()

    from tests.servers import elasticsearch

    server = None
    url = args.es
    if not url:
        server, url = elasticsearch.start("bench-elasticsearch")
    try:
        rows = [compare(name, split, url) for name, split in (item.split(":") for item in args.datasets.split(","))]
    finally:
        if server is not None:
            server.stop()
    print(table(rows))
    out = results.RESULTS_DIR / "lexical_parity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1))
    print(f"written: {out}", file=sys.stderr)


def compare(name: str, split: str, url: str) -> dict:
    from engines.analysis import analyzer_for
    from engines.base import LexicalDocument
    from engines.elasticsearch_index import ElasticsearchLexicalIndex
    from engines.tantivy_index import TantivyLexicalIndex
    from retrieval.evaluation.datasets import load_dataset
    from retrieval.evaluation.metrics import ndcg_at_k

    dataset = load_dataset(datasets.DATASETS_DIR / name, split)
    analyzer = analyzer_for([])
    ids = list(dataset.corpus)
    documents = [
        LexicalDocument(chunk_id=i, doc_id=i, tenant_id=1, text=analyzer.analyze(f"{title}\n{text}"))
        for i, (title, text) in enumerate(dataset.corpus.values())
    ]
    state = {"analyzer_version": analyzer.version, "dictionary_fingerprint": analyzer.dictionary_fingerprint}
    es = ElasticsearchLexicalIndex(url, prefix=f"parity-{name}", search_deadline_s=30)
    es.drop_version(1)
    with tempfile.TemporaryDirectory() as folder:
        tantivy = TantivyLexicalIndex(Path(folder))
        for index in (tantivy, es):
            index.build_version(1, iter(documents), **state)
        ndcg = {"tantivy": [], "elasticsearch": []}
        identical = 0
        for query_id, judgments in dataset.qrels.items():
            tokens = analyzer.tokens(dataset.queries[query_id])
            tops = {}
            for engine, index in (("tantivy", tantivy), ("elasticsearch", es)):
                hits = index.search(1, 1, tokens, 10, None)
                tops[engine] = [ids[hit.chunk_id] for hit in hits]
                ndcg[engine].append(ndcg_at_k(tops[engine], judgments))
            identical += tops["tantivy"] == tops["elasticsearch"]
    es.drop_version(1)
    count = len(dataset.qrels)
    return {
        "set": f"{name} ({split})",
        "queries": count,
        "tantivy": round(sum(ndcg["tantivy"]) / count, 4),
        "elasticsearch": round(sum(ndcg["elasticsearch"]) / count, 4),
        "identical_top10": round(identical / count, 4),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| set | queries | nDCG@10 tantivy | nDCG@10 Elasticsearch | difference | identical top 10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['set']} | {row['queries']:,} | {row['tantivy']:.4f} | {row['elasticsearch']:.4f} "
            f"| {row['elasticsearch'] - row['tantivy']:+.4f} | {row['identical_top10']:.1%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
