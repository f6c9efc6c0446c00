"""Document-aware ranking: the chunks of one document counted together, before ``top_k`` is cut.

``aggregate`` (how a document's matched chunks add up):

- ``none``: every chunk on its own fused score (the default);
- ``max``: a document scores as its best chunk, and its other chunks follow that one;
- ``sum``: its best chunk's score plus a damped sum of the next ones
  (``s1 + DAMPING * s2 + DAMPING**2 * s3 ...``): a document matched in several places is more likely
  relevant than one matched once as strongly.

Chunks are then ordered by their document's score, then their own. ``group_by: "document"`` keeps
one hit per document, its best chunk (after reranking, if any), with its other matched chunks as
``passages``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from retrieval.fusion_functions import FusedCandidate

DAMPING = 0.5
MAX_PASSAGES = 3  # other chunks shown with a document's hit


def aggregate(
    candidates: Sequence[FusedCandidate], document_of: Mapping[int, int], method: str
) -> tuple[list[FusedCandidate], dict[int, float]]:
    """The candidates reordered by their document's score, and each chunk's document score; with
    ``none``, unchanged and no scores. A chunk missing from ``document_of`` is a document of its own."""
    if method == "none":
        return list(candidates), {}
    by_document: dict[int, list[FusedCandidate]] = {}
    for candidate in candidates:  # best first within each document: the fused order is kept
        by_document.setdefault(_document(candidate, document_of), []).append(candidate)
    scores = {}
    for document, chunks in by_document.items():
        if method == "max":
            scores[document] = chunks[0].fused_score
        else:
            scores[document] = sum(chunk.fused_score * DAMPING**i for i, chunk in enumerate(chunks))
    order = {candidate.chunk_id: i for i, candidate in enumerate(candidates)}
    ranked = sorted(candidates, key=lambda c: (-scores[_document(c, document_of)], order[c.chunk_id]))
    return ranked, {c.chunk_id: scores[_document(c, document_of)] for c in candidates}


@dataclass(frozen=True)
class Grouped:
    candidates: list[FusedCandidate]  # one per document, its best chunk
    passages: dict[int, list[int]]  # best chunk id -> the document's other matched chunk ids, best first


def group_by_document(candidates: Sequence[FusedCandidate], document_of: Mapping[int, int]) -> Grouped:
    best: dict[int, FusedCandidate] = {}
    passages: dict[int, list[int]] = {}
    for candidate in candidates:
        document = _document(candidate, document_of)
        if document not in best:
            best[document] = candidate
            passages[candidate.chunk_id] = []
        elif len(others := passages[best[document].chunk_id]) < MAX_PASSAGES:
            others.append(candidate.chunk_id)
    return Grouped(list(best.values()), passages)


def _document(candidate: FusedCandidate, document_of: Mapping[int, int]) -> int:
    # A chunk whose row is gone keeps a key no document has (negative ids), so it stays on its own.
    return document_of.get(candidate.chunk_id, -candidate.chunk_id)
