"""The hydrate stage: the cut candidates read back as the API's hits, with the evidence of each."""

from __future__ import annotations

from retrieval import selectors
from retrieval.fusion_functions import FusedCandidate
from retrieval.grouping import Grouped
from retrieval.relevance import RelevanceScales
from retrieval.relevance_calibration import calibrated
from retrieval.services.parents import Parents
from retrieval.types import LegResult, SearchHit, SearchRequest
from tenants.models import Tenant


def hydrate(
    tenant: Tenant,
    request: SearchRequest,
    head: Grouped,
    rerank_scores: dict[int, float] | None,
    scales: RelevanceScales,
    *,
    legs: list[LegResult],
    document_scores: dict[int, float],
    fused: list[FusedCandidate],
    parents: Parents,
) -> list[SearchHit]:
    """The hits, those under the request's ``relevance`` threshold left out (``relevance`` calibrated:
    ``retrieval.relevance_calibration``). One retriever and one query: its raw score (cosine or BM25) is the most useful score to show. A hit's ``retrievers``
    entry carries what its leg explains (the graph: its path); grouped by document, its passages; a
    child chunk's hit, its parent passage as content and the children that matched."""
    single_list = sum(len(leg.lists) for leg in legs) == 1
    explanations = {leg.retriever: leg.explanations for leg in legs if leg.explanations}
    fused_by_id = {c.chunk_id: c for c in fused} if head.passages else {}
    head_ids = [candidate.chunk_id for candidate in head.candidates]
    by_id = selectors.chunks_with_documents(tenant, head_ids, parents=bool(parents.children))
    passages = selectors.passages(tenant, [chunk_id for ids in head.passages.values() for chunk_id in ids])
    lists = [ranked for leg in legs for ranked in leg.lists]
    results: list[SearchHit] = []
    for candidate in head.candidates:
        chunk = by_id.get(candidate.chunk_id)
        if chunk is None:  # replaced by a concurrent re-ingest between two reads
            continue
        # calibrated after ranking (fusion read the raw scores), rounded as shown, as thresholded
        relevance = round(calibrated(scales.relevance(candidate, chunk.kb_version_id)), 6)
        if relevance < request.score_threshold:
            continue
        rerank_score = rerank_scores.get(candidate.chunk_id) if rerank_scores else None
        if rerank_score is not None:
            score = rerank_score
        elif single_list:
            score = next(iter(candidate.retrievers.values())).score
        else:
            score = candidate.fused_score
        results.append(
            SearchHit(
                chunk_id=chunk.pk,
                doc_id=chunk.document_id,
                kb_id=chunk.knowledge_base_id,
                content=chunk.content if chunk.parent is None else chunk.parent.content,
                score=round(float(score), 6),
                source=request.mode,
                rank=len(results) + 1,
                title=chunk.document.title,
                source_uri=chunk.document.source_uri,
                doc_type=chunk.doc_type,
                metadata={**chunk.metadata, "tags": chunk.tags, "ordinal": chunk.ordinal},
                relevance=relevance,
                section=chunk.metadata.get("section"),
                fused_score=round(candidate.fused_score, 6),
                rerank_score=_rounded(rerank_score),
                retrievers={
                    name: {
                        "rank": c.rank,
                        "score": round(float(c.score), 6),
                        "query": c.query,
                        **explanations.get(name, {}).get(candidate.chunk_id, {}),
                    }
                    for name, c in candidate.retrievers.items()
                },
                matched_queries=candidate.matched_queries,
                document_score=_rounded(document_scores.get(candidate.chunk_id)),
                passages=None
                if candidate.chunk_id not in head.passages
                else [
                    {
                        "chunk_id": chunk_id,
                        "content": passages[chunk_id][0],
                        "ordinal": passages[chunk_id][1],
                        "fused_score": round(fused_by_id[chunk_id].fused_score, 6),
                    }
                    for chunk_id in head.passages[candidate.chunk_id]
                    if chunk_id in passages  # else replaced by a concurrent re-ingest
                ],
                parent_id=chunk.parent_id,
                children=None if chunk.parent_id is None else parents.matched(lists, candidate.key),
            )
        )
    return results


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)
