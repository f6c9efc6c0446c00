"""A random sample of the entities the current extractor finds, for judging their precision by hand:
distinct names drawn with a fixed seed from every parsed section of ``sample_kb/`` or every passage of a
BEIR corpus (``--corpus``), with no curated vocabulary (``--tenant``: that tenant's) and
without the names in a large share of the passages (``engines.graph_extraction.common_names``, as
``rebuild_graph`` drops them), printed as ``name/kind``.

    .venv/bin/python -m bench.graph.entity_sample [--size 100] [--seed 29] [--corpus ../shared/datasets/cmrc2018]

Judged samples and results: docs/benchmarks/entity-precision.md and docs/BENCHMARKS.md, "Graph retrieval".
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from bench.harness import project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--corpus", type=Path, help="a BEIR dataset's folder (its corpus.jsonl) instead of sample_kb/")
    parser.add_argument("--tenant", help="extract with this tenant's curated vocabulary (e.g. load_sample's demo)")
    options = parser.parse_args()
    project.setup_django()
    from engines.analysis import Analyzer
    from engines.graph_extraction import EXTRACTOR_VERSION, EntityExtractor, common_names

    if options.corpus:
        with open(options.corpus / "corpus.jsonl", encoding="utf-8") as lines:
            texts = [doc["text"] for doc in map(json.loads, lines)]  # as ingestion's chunks: the title is metadata
    else:
        from knowledge.ingestion.files import discover_files
        from knowledge.parsing import parse_file

        texts = [section.text for f in discover_files([Path("sample_kb")]) for section in parse_file(f.path).sections]
    if options.tenant:
        from graph.extraction import entity_extractor_for_tenant
        from tenants.selectors import tenant_by_name

        extractor = entity_extractor_for_tenant(tenant_by_name(options.tenant).pk)
    else:
        extractor = EntityExtractor(Analyzer())
    extractions = [extractor.extract(text).entities for text in texts]
    common = common_names(Counter(entity.name for entities in extractions for entity in entities), len(texts))
    kinds: dict[str, str] = {}
    for entities in extractions:
        for entity in entities:
            if entity.name not in common or entity.kind == "term":
                kinds.setdefault(entity.name, entity.kind)
    picked = sorted(random.Random(options.seed).sample(sorted(kinds), min(options.size, len(kinds))))
    print(f"extractor {EXTRACTOR_VERSION}: {len(texts)} passages, {len(kinds)} distinct entities, {len(common)} common")
    print(" | ".join(f"{name}/{kinds[name]}" for name in picked))


if __name__ == "__main__":
    main()
