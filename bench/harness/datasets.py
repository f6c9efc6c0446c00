"""The shared evaluation datasets in BEIR layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels/``), beside
the checkout in ``../shared/datasets`` or wherever ``DATASETS_DIR`` says (a git worktree elsewhere), and
the embeddings of their passages, cached under ``bench/results/cache/``."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from bench.harness.project import REPO_ROOT
from bench.harness.results import RESULTS_DIR

DATASETS_DIR = Path(os.environ.get("DATASETS_DIR") or REPO_ROOT.parent / "shared" / "datasets")


def read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                rows.append(json.loads(line))
                if limit is not None and len(rows) >= limit:
                    break
    return rows


def scifact_passages_and_queries() -> tuple[list[str], list[str]]:
    """Every SciFact passage (title + text) and every query text, in file order."""
    corpus = read_jsonl(DATASETS_DIR / "scifact" / "corpus.jsonl")
    passages = [f"{row.get('title', '')} {row.get('text', '')}".strip() for row in corpus]
    queries = [row["text"] for row in read_jsonl(DATASETS_DIR / "scifact" / "queries.jsonl")]
    return passages, queries


def embedded_passages(embedder, passages: list[str], cache: bool):
    """Embeddings of ``passages``: (vectors, seconds spent embedding, from cache). Cached by model,
    token limit and content, so a later run (or another benchmark) reads them back."""
    import numpy as np

    key = hashlib.sha256(
        json.dumps([embedder.model_name, embedder.max_tokens, len(passages)]).encode()
        + hashlib.sha256("\n".join(passages).encode()).digest()
    ).hexdigest()[:16]
    path = RESULTS_DIR / "cache" / f"scifact-vectors-{key}.npy"
    if cache and path.exists():
        return np.load(path), 0.0, True
    started = time.perf_counter()
    vectors = embedder.embed_documents(passages)
    seconds = time.perf_counter() - started
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors, seconds, False


def write_corpus(rows: list[dict], folder: Path, block_docs: int) -> tuple[list[Path], int]:
    """A corpus's rows as .txt files (title, blank line, text) in folders of ``block_docs``: the folders
    and the bytes written."""
    blocks: list[Path] = []
    total = 0
    for i, row in enumerate(rows):
        if i % block_docs == 0:
            blocks.append(folder / f"block-{len(blocks):02d}")
            blocks[-1].mkdir()
        title, text = (row.get("title") or "").strip(), (row.get("text") or "").strip()
        body = f"{title}\n\n{text}\n" if title else f"{text}\n"
        (blocks[-1] / f"{i:05d}.txt").write_text(body, encoding="utf-8")
        total += len(body.encode())
    return blocks, total
