"""The rows of ``bench.filtered_scale``: the synthetic corpus (``bench.synthetic``) or SciFact's real
passages and sentences, loaded by the production COPY with the filter fields of ``bench.filtered_scale.peers``
on each row and its document."""

from __future__ import annotations

import re

import numpy as np

from bench import synthetic
from bench.filtered_scale import peers
from bench.harness import datasets


def real_texts() -> list[str]:
    """SciFact's passages and their sentences of 40 characters or more, in corpus order."""
    passages, _ = datasets.scifact_passages_and_queries()
    out = []
    for passage in passages:
        out.append(passage[:1000])
        out += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", passage) if len(s) >= 40]
    return out


def load_rows(kb, texts: list[str], vectors: np.ndarray, first: int) -> None:
    """Rows ``first..first+len(vectors)`` by the production COPY (``bench.synthetic``), ``peers.CHUNKS_PER_DOC``
    to a document whose created_at and tags the chunks carry; row g's text ``texts[g - first]`` plus the
    unique suffix that ``bench.synthetic.build_keyword_index`` analyzes apart."""
    synthetic.load_synthetic_documents(
        kb,
        texts,
        vectors,
        np.arange(len(vectors)),
        len(vectors) // peers.CHUNKS_PER_DOC,
        first_row=first,
        metadata=peers.row_metadata,
        labels=peers.document_labels,
    )
