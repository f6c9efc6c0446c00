"""Global graph search (``POST /graph`` with ``"scope": "global"``): the communities of the searched KB
versions ranked against the query, for questions about a whole corpus.

Two lists fused by the same weighted RRF as passages: BM25 (Okapi, k1 = 1.2, b = 0.75) over the
analyzed summaries, with the statistics of the communities in scope, and the cosine of the query's
vector to each summary's vector under the version's model. Either list failing is a ``degraded`` entry;
the graph store failing (no communities to rank) is a 503 ``graph_unavailable``. Each community comes
with its summary, key entities and supporting passages (those passing the filters).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from django.conf import settings

from engines.analysis import Analyzer
from engines.base import Community, GraphScope
from engines.embedders import get_embedder
from graph.readable import ReadableChunks, ReadableGraph
from knowledge.models import Chunk
from knowledge.selectors.search import searched_knowledge, tenant_vocabulary
from knowledge.stores import graph_store
from retrieval import selectors
from retrieval.access import readable_to_reader, reader_check
from retrieval.errors import GraphUnavailable
from retrieval.filters import CompiledFilter, compile_filters
from retrieval.fusion_functions import FusedCandidate, RankedList, reciprocal_rank_fusion
from retrieval.services.degradation import degradation_of
from retrieval.services.planning import model_groups
from retrieval.services.timings import StageTimings
from retrieval.types import Degradation
from tenants.models import Tenant

BM25_K1, BM25_B = 1.2, 0.75


@dataclass(frozen=True)
class GlobalGraphRequest:
    query: str
    top_k: int = 5
    kb_ids: list[int] | None = None
    level: int | None = 0
    filters: dict[str, Any] | None = None
    chunks_per_community: int = 3
    reader: tuple[str, ...] = ("*",)  # the reader's principals (retrieval.access.key_access)
    reachable_kb_ids: tuple[int, ...] | None = None


@dataclass
class GlobalGraphResponse:
    communities: list[dict[str, Any]]
    degraded: list[Degradation] = field(default_factory=list)
    candidates: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": "global",
            "communities": self.communities,
            "total": len(self.communities),
            "degraded": [d.as_dict() for d in self.degraded],
            "candidates": self.candidates,
            "timings_ms": self.timings_ms,
        }


def global_graph_search(tenant: Tenant, request: GlobalGraphRequest) -> GlobalGraphResponse:
    timings = StageTimings()
    degraded: list[Degradation] = []
    with timings.stage("total"):
        compiled = compile_filters(request.filters)
        knowledge = searched_knowledge(tenant, request.kb_ids, request.reachable_kb_ids)
        reader = reader_check(request.reader, knowledge)
        if reader is not None:
            compiled = compiled.for_reader(reader)
        versions = knowledge.versions
        vocabulary = tenant_vocabulary(tenant.pk, knowledge.vocabulary_stamp)  # the analyzer of the BM25 list
        kb_of_version = {version.version_id: version.kb_id for version in versions}
        groups = model_groups(versions)
        store = graph_store()
        with timings.stage("graph"):
            try:
                communities = [
                    (group.model_name, community)
                    for group in groups
                    for community in store.communities(GraphScope(tenant.pk, group.version_ids), request.level)
                ]
            except Exception as exc:
                failure = degradation_of("graph", exc)
                raise GraphUnavailable(f"graph search is unavailable: {failure.message}") from exc
            if reader is not None:
                communities = _readable(tenant, communities, reader)
        lists = []
        with timings.stage("bm25"):
            try:
                lists.append(
                    RankedList("bm25", request.query, 1.0, _bm25(vocabulary.analyzer, request.query, communities))
                )
            except Exception as exc:
                degraded.append(degradation_of("bm25", exc))
        with timings.stage("vector"):
            try:
                lists.append(RankedList("vector", request.query, 1.0, _cosine(request.query, communities)))
            except Exception as exc:
                degraded.append(degradation_of("vector", exc))
        with timings.stage("fuse"):
            fused = reciprocal_rank_fusion(lists, k=settings.RRF_K)[: request.top_k]
        with timings.stage("hydrate"):
            results = _hydrate(tenant, fused, communities, kb_of_version, compiled, request.chunks_per_community)
    return GlobalGraphResponse(results, degraded, len(communities), timings.milliseconds)


def _readable(
    tenant: Tenant, communities: list[tuple[str, Community]], reader: tuple[str, ...]
) -> list[tuple[str, Community]]:
    """The communities whose summary the reader may see: every passage it was built from passes the
    reader's ACL check (a summary quotes them), and each key entity it names is mentioned by a passage
    the reader may read (``graph.readable``; docs/permissions.md). Left out before ranking, so their
    count and scores tell nothing either."""
    check = compile_filters(None, reader)
    wanted = list({chunk_id for _, community in communities for chunk_id in community.chunk_ids})
    readable = selectors.hashes_of_chunks_passing(tenant, wanted, check) if wanted else {}
    kept = [
        (model, community)
        for model, community in communities
        if community.chunk_ids and all(chunk_id in readable for chunk_id in community.chunk_ids)
    ]
    if not kept:
        return kept
    scope = GraphScope(tenant.pk, tuple(sorted({community.version_id for _, community in kept})))
    named = ReadableGraph(
        graph_store(), scope, (e for _, c in kept for e in c.entity_ids[: len(c.key_entities)]),
        cast(ReadableChunks, readable_to_reader(tenant, reader)),
    )  # fmt: skip
    return [
        (model, community)
        for model, community in kept
        if all(map(named.named, community.entity_ids[: len(community.key_entities)]))
    ]


def _bm25(analyzer: Analyzer, query: str, communities: list[tuple[str, Community]]) -> list[tuple[int, float]]:
    """(position in ``communities``, Okapi BM25 of the summary), best first; summaries without a query
    term are left out."""
    terms = set(analyzer.tokens(query))
    documents = [community.analyzed.split() for _, community in communities]
    if not terms or not documents:
        return []
    average = sum(map(len, documents)) / len(documents) or 1.0
    frequency = Counter(term for document in documents for term in set(document) & terms)
    scores = []
    for position, document in enumerate(documents):
        counts = Counter(token for token in document if token in terms)
        score = 0.0
        for term, count in counts.items():
            idf = math.log(1 + (len(documents) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * count * (BM25_K1 + 1) / (count + BM25_K1 * (1 - BM25_B + BM25_B * len(document) / average))
        if score > 0:
            scores.append((position, score))
    return sorted(scores, key=lambda hit: (-hit[1], hit[0]))


def _cosine(query: str, communities: list[tuple[str, Community]]) -> list[tuple[int, float]]:
    """(position, cosine of the query to the summary) under each community's model, best first."""
    scores = []
    for model in sorted({model for model, community in communities if community.embedding}):
        vector = get_embedder(model).embed_query(query)
        positions = [i for i, (m, community) in enumerate(communities) if m == model and community.embedding]
        matrix = np.array([communities[i][1].embedding for i in positions], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(vector) or 1.0)
        similarity = matrix @ vector / np.where(norms > 0, norms, 1.0)
        scores += [(position, float(score)) for position, score in zip(positions, similarity, strict=True)]
    return sorted(scores, key=lambda hit: (-hit[1], hit[0]))


def _hydrate(
    tenant: Tenant,
    fused: list[FusedCandidate],
    communities: list[tuple[str, Community]],
    kb_of_version: dict[int, int],
    compiled: CompiledFilter,
    per_community: int,
) -> list[dict[str, Any]]:
    chosen = [communities[candidate.chunk_id][1] for candidate in fused]
    wanted = [chunk_id for community in chosen for chunk_id in community.chunk_ids]
    passing = selectors.hashes_of_chunks_passing(tenant, wanted, compiled)
    chunks = selectors.chunks_with_documents(
        tenant, [chunk_id for chunk_id in wanted if chunk_id in passing], parents=True
    )
    results = []
    for rank, (candidate, community) in enumerate(zip(fused, chosen, strict=True), start=1):
        supporting = _passages([chunks[c] for c in community.chunk_ids if c in chunks])[:per_community]
        results.append({
            "kb_id": kb_of_version[community.version_id],
            "level": community.level,
            "number": community.number,
            "parent": community.parent,
            "rank": rank,
            "score": round(candidate.fused_score, 6),
            "summary": community.summary,
            "key_entities": list(community.key_entities),
            "size": len(community.entity_ids),
            "retrievers": {
                name: {"rank": contribution.rank, "score": round(contribution.score, 6)}
                for name, contribution in candidate.retrievers.items()
            },
            "chunks": [
                {"chunk_id": chunk.pk, "doc_id": chunk.document_id, "title": chunk.document.title,
                 "source_uri": chunk.document.source_uri, "parent_id": chunk.parent_id,
                 "content": chunk.content if chunk.parent is None else chunk.parent.content}
                for chunk in supporting
            ],
        })  # fmt: skip
    return results


def _passages(chunks: list[Chunk]) -> list[Chunk]:
    """The passages a community's chunks show, as a search's hits do: a child chunk shows its parent
    passage (``parent_child`` KBs), each parent once, through its first child."""
    shown_parents: set[int] = set()
    passages = []
    for chunk in chunks:
        if chunk.parent_id is not None:
            if chunk.parent_id in shown_parents:
                continue
            shown_parents.add(chunk.parent_id)
        passages.append(chunk)
    return passages
