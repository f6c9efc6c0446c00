"""The default entity extractor of this checkout against another checkout's, on the same passages:
precision / recall of this one's entity sets against the other's, and the extraction time of each,
interleaved in rounds (this, other, this, other...).

    mkdir -p var/before && git archive cfa06c5 | tar -x -C var/before
    .venv/bin/python bench/entity_agreement.py --dataset cmrc2018 --docs 1000 --code var/before

Each side runs in its own process (``--dump``) on its own code with the default analyzer (Lucene's English
stopwords, no tenant dictionary), so nothing but the extractor differs; jieba's tables are loaded before
the clock starts. Results go to docs/BENCHMARKS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common


def dump(code: Path, corpus: Path, docs: int) -> None:
    """Print {"seconds": extraction time, "entities": [[names of passage 1], ...]} for ``code``'s extractor."""
    sys.path.insert(0, str(code.resolve()))
    from engines.analysis import Analyzer
    from engines.graph_extraction import EntityExtractor

    texts = [row["text"] for row in _common.read_jsonl(corpus, docs)]
    extractor = EntityExtractor(Analyzer())
    extractor.extract("预热 warm-up 鱼香肉丝")  # jieba's dictionary and tags load once per process
    started = time.perf_counter()
    entities = [sorted(entity.name for entity in extractor.extract(text).entities) for text in texts]
    print(json.dumps({"seconds": time.perf_counter() - started, "entities": entities}, ensure_ascii=False))


def run(code: Path, corpus: Path, docs: int) -> dict:
    command = [sys.executable, __file__, "--dump", str(code), "--corpus", str(corpus), "--docs", str(docs)]
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="cmrc2018", help="a folder of the shared datasets")
    parser.add_argument("--docs", type=int, default=1000, help="the corpus's first N passages")
    parser.add_argument("--code", type=Path, help="the other checkout (the reference)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        dump(args.dump, args.corpus, args.docs)
        return
    corpus = _common.DATASETS_DIR / args.dataset / "corpus.jsonl"
    print("load average:", os.getloadavg())
    times: dict[str, list[float]] = {"this": [], "other": []}
    for _ in range(args.rounds):
        mine, theirs = run(_common.REPO_ROOT, corpus, args.docs), run(args.code, corpus, args.docs)
        times["this"].append(mine["seconds"])
        times["other"].append(theirs["seconds"])
    found = [set(names) for names in mine["entities"]]
    reference = [set(names) for names in theirs["entities"]]
    shared = sum(len(a & b) for a, b in zip(found, reference, strict=True))
    same = sum(a == b for a, b in zip(found, reference, strict=True))
    print(f"{args.dataset}, {len(found)} passages: precision {shared / max(sum(map(len, found)), 1):.3f}, "
          f"recall {shared / max(sum(map(len, reference)), 1):.3f} against {args.code}; identical sets {same}; "
          f"entities per passage {sum(map(len, found)) / len(found):.1f} vs "
          f"{sum(map(len, reference)) / len(found):.1f}")
    for side, seconds in times.items():
        rounds = " / ".join(f"{s:.2f}" for s in seconds)
        print(f"extraction, {side}: {rounds} s = {1000 * min(seconds) / len(found):.2f} s per 1,000 passages (best)")
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
