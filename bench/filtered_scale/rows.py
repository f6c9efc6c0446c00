"""The rows of ``bench.filtered_scale``: the synthetic corpus (``bench.synthetic``) or SciFact's real
passages and sentences, loaded by the production COPY with the filter fields of ``bench.filtered_scale.peers``
on each row and its document."""

from __future__ import annotations

import re

import numpy as np

from bench.filtered_scale import peers
from bench.harness import datasets
from bench.synthetic import SYNTHETIC_TAG


def real_texts() -> list[str]:
    """SciFact's passages and their sentences of 40 characters or more, in corpus order."""
    passages, _ = datasets.scifact_passages_and_queries()
    out = []
    for passage in passages:
        out.append(passage[:1000])
        out += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", passage) if len(s) >= 40]
    return out


def load_rows(kb, texts: list[str], vectors: np.ndarray, first: int) -> None:
    """Rows ``first..first+len(vectors)`` by the production COPY, ``peers.CHUNKS_PER_DOC`` to a document
    whose created_at and tags the chunks carry; row g's text ``texts[i]`` plus the unique suffix that
    ``bench.synthetic.build_keyword_index`` analyzes apart."""
    from django.db import transaction

    from knowledge.chunking import ChunkDraft
    from knowledge.ingestion.chunk_copy import ChunkBatch, copy_chunks
    from knowledge.ingestion.files import Labels
    from knowledge.models import Document

    per = peers.CHUNKS_PER_DOC
    numbers = range(first // per, (first + len(vectors)) // per)
    docs = Document.objects.bulk_create(
        Document(
            tenant=kb.tenant,
            knowledge_base=kb,
            source_uri=f"synthetic/{n:06d}.txt",
            title=f"document {n}",
            status=Document.Status.READY,
            chunk_count=per,
        )
        for n in numbers
    )
    batches = []
    for n, doc in zip(numbers, docs, strict=True):
        doc.created_at, tags = peers.document_labels(n)
        rows = range(n * per - first, (n + 1) * per - first)
        drafts = [
            ChunkDraft(text=(text := f"{texts[i]}{SYNTHETIC_TAG}{first + i}]"), token_count=len(text) // 5)
            for i in rows
        ]
        for i, draft in zip(rows, drafts, strict=True):
            draft.metadata = peers.row_metadata(first + i)
        batches.append(ChunkBatch(doc, drafts, vectors[rows.start : rows.stop], Labels(tags=tags)))
    with transaction.atomic():
        Document.objects.bulk_update(docs, ["created_at"])
        copy_chunks(kb, kb.active_version, batches)
