"""Collect the raw ``relevance`` of every judged query's top-10 documents on the shared sets' tuning
splits (what a ``score_threshold`` acts on), with whether each is judged relevant: the data the
calibration of ``relevance`` (``retrieval.relevance_calibration``) is fitted on.

Uses the evaluation KBs ``manage.py evaluate`` left in ``var/`` (it ingests them; this does not).
Writes ``--output``: per set and mode, nDCG@10 and ``[[relevance, judged], ...]`` as the search
reports ``relevance`` (run it on the code before the calibration for the raw scale the fit needs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.harness import project

SETS = {"scifact": "train", "xquad-en": "dev", "xquad-zh": "dev", "cmrc2018": "dev", "drcd": "dev"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", type=Path, default=Path("../shared/datasets"))
    parser.add_argument("--modes", default="hybrid")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    project.setup_django()

    from knowledge.models import KnowledgeBase
    from retrieval.evaluation.datasets import load_dataset
    from retrieval.evaluation.runs import run_variant
    from retrieval.evaluation.variants import DEPTH, build_variants

    out: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "sets": {}}
    for name in args.sets.split(","):
        dataset = load_dataset(args.datasets / name, SETS[name])
        kb = KnowledgeBase.objects.get(tenant__name="eval", name__startswith=f"{name}-all-minilm-l6-v2-")
        query_ids = list(dataset.qrels)
        out["sets"][name] = {"split": SETS[name], "kb": kb.name, "modes": {}}
        for variant in build_variants(args.modes.split(","), candidates=[DEPTH]):
            result = run_variant(kb.tenant, kb, dataset, variant, query_ids)
            ndcg = sum(q["ndcg@10"] for q in result.per_query.values()) / len(result.per_query)
            out["sets"][name]["modes"][variant.mode] = {
                "ndcg@10": round(ndcg, 4),
                "hits": [[round(score, 6), judged] for score, judged in result.judged()],
            }
            print(name, variant.mode, round(ndcg, 4), flush=True)
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
