"""A random sample of the entities the current extractor finds in ``sample_kb/``, for judging their
precision by hand (issue 29): distinct names drawn with a fixed seed from every parsed section, with no
curated vocabulary, printed as ``name/kind``.

    .venv/bin/python bench/entity_sample.py [--size 100] [--seed 29]

Judged samples and results: docs/benchmarks/entity-precision.md and docs/BENCHMARKS.md, "Graph retrieval".
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import _common


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=29)
    options = parser.parse_args()
    _common.setup_django()
    from engines.analysis import Analyzer
    from engines.graph_extraction import EXTRACTOR_VERSION, EntityExtractor
    from knowledge.ingestion.files import discover_files
    from knowledge.parsing import parse_file

    extractor = EntityExtractor(Analyzer())
    sections = [section.text for f in discover_files([Path("sample_kb")]) for section in parse_file(f.path).sections]
    kinds: dict[str, str] = {}
    for text in sections:
        for entity in extractor.extract(text).entities:
            kinds.setdefault(entity.name, entity.kind)
    picked = sorted(random.Random(options.seed).sample(sorted(kinds), min(options.size, len(kinds))))
    print(f"extractor {EXTRACTOR_VERSION}: {len(sections)} sections, {len(kinds)} distinct entities")
    print(" | ".join(f"{name}/{kinds[name]}" for name in picked))


if __name__ == "__main__":
    main()
