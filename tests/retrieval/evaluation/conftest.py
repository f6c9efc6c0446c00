"""A BEIR-layout dataset folder written from rows, for the evaluation's tests."""

import json


def write_beir(folder, corpus, queries, qrels, split="test"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries), encoding="utf-8")
    (folder / "qrels").mkdir(exist_ok=True)
    rows = "".join(f"{qid}\t{doc}\t{score}\n" for qid, doc, score in qrels)
    (folder / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return folder
