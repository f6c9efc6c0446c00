"""The yardstick of ``bench.ingest``: the raw ``embed_documents`` of the same texts, one call per block or
in the groups ``Ingester`` flushes, and the padded tokens each way costs the model."""

from __future__ import annotations

import time


def raw_encode(embedder, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed_documents(texts)
    return time.perf_counter() - started


def raw_encode_groups(embedder, groups: list[list[str]]) -> float:
    started = time.perf_counter()
    for group in groups:
        embedder.embed_documents(group)
    return time.perf_counter() - started


def padded_tokens(embedder, calls: list[list[str]], batch_size: int = 32) -> tuple[int, int]:
    """(real, padded) token counts the model processes for these encode calls: sentence-transformers
    sorts each call's texts by character length, cuts batches of ``batch_size`` and pads every batch
    to its longest member (special tokens included, truncated at max_seq_length)."""
    special, limit = 2, embedder.max_tokens + 2  # [CLS] and [SEP]
    real = padded = 0
    for texts in calls:
        ordered = sorted(texts, key=len, reverse=True)
        for start in range(0, len(ordered), batch_size):
            batch = ordered[start : start + batch_size]
            lengths = [min(embedder.count_tokens(text) + special, limit) for text in batch]
            real += sum(lengths)
            padded += max(lengths) * len(lengths)
    return real, padded


def flush_groups(per_doc: list[list[str]], flush_at: int, first: int | None = None) -> list[list[str]]:
    """The text lists Ingester.ingest hands to embed_documents: it flushes once ``first`` chunks are
    pending (default: ``flush_at``), then at twice as many each time, up to ``flush_at``."""
    groups, pending = [], []
    size = min(first or flush_at, flush_at)
    for texts in per_doc:
        pending.extend(texts)
        if len(pending) >= size:
            groups.append(pending)
            pending = []
            size = min(2 * size, flush_at)
    if pending:
        groups.append(pending)
    return groups
