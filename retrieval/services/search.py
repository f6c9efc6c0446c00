"""The search pipeline behind every retrieval endpoint, as an outline: each stage is one call into its
module, and the stages hand each other typed values (the result cache sits in front:
``retrieval.cache.cached_search``).

The failure rule: anything an optional stage raises (the expansion, a leg of a search with another
leg, BM25's feedback pass, the union, the document stage, the reranker) becomes a ``degraded`` entry
``{"stage", "cause", "message"}`` and one warning; only when no retriever of the search answers is it
an error, a 503 naming the failed retriever.
"""

from __future__ import annotations

import numpy as np
from django.conf import settings

from core.metrics import record_search
from engines.database import read_notes
from graph.query_setup import graph_setup_of
from knowledge.models import PARENT_CHILD
from knowledge.selectors.search import SearchedKnowledge, searched_knowledge, tenant_vocabulary
from retrieval.access import reader_check
from retrieval.filters import compile_filters
from retrieval.relevance import RelevanceScales, dense_backgrounds
from retrieval.services.context import SearchContext
from retrieval.services.document_order import order_by_document, top_k_hits
from retrieval.services.explain import explain
from retrieval.services.fusion_stage import fuse
from retrieval.services.hydrate import hydrate
from retrieval.services.legs import retrieve
from retrieval.services.parents import parents_of
from retrieval.services.planning import caller_vector, expand, model_groups, retriever_weights, searched_settings
from retrieval.services.rerank import rerank
from retrieval.services.timings import StageTimings
from retrieval.services.union import score_union
from retrieval.types import RETRIEVERS, SearchRequest, SearchResponse
from tenants.models import Tenant


def search(
    tenant: Tenant,
    request: SearchRequest,
    knowledge: SearchedKnowledge | None = None,
    *,
    embedded: np.ndarray | None = None,
    timings: StageTimings | None = None,
) -> SearchResponse:
    """One search, uncached; records its metrics. ``knowledge``: what ``searched_knowledge`` read for
    this request (the cache key's read), else read here. ``embedded``: the query's vector under the
    searched versions' one model, embedded already (the semantic cache's lookup), so the dense leg does
    not embed it again; ``timings``: the stages timed before, which ``total`` includes."""
    timings = timings or StageTimings()
    with timings.stage("total"):
        compiled = compile_filters(request.filters)
        if knowledge is None:
            knowledge = searched_knowledge(tenant, request.kb_ids, request.reachable_kb_ids)
        reader = reader_check(request.reader, knowledge)
        if reader is not None:
            compiled = compiled.for_reader(reader)
        fusion = searched_settings(request, knowledge)
        groups = model_groups(knowledge.versions)
        query_vector = caller_vector(request, groups) if embedded is None else embedded
        version_ids = tuple(version_id for group in groups for version_id in group.version_ids)
        vocabulary = tenant_vocabulary(tenant.pk, knowledge.vocabulary_stamp)
        with timings.stage("expand"):
            expansion = expand(tenant, request, version_ids, vocabulary.synonyms)
        weights = retriever_weights(request, groups, fusion)
        context = SearchContext(
            tenant=tenant, groups=tuple(groups), version_ids=version_ids, variants=tuple(expansion.variants),
            weights=weights.by_retriever, compiled=compiled, analyzer=vocabulary.analyzer,
            depths={name: fusion.depth(name) for name in RETRIEVERS}, hops=settings.GRAPH_HOPS if request.hops is None else request.hops,
            feedback=fusion.feedback, timings=timings, query_vector=query_vector,
            graph_setup=graph_setup_of(tenant.pk, knowledge) if weights.by_retriever["graph"] > 0 else None,
        )  # fmt: skip
        retrieved = retrieve(context)
        union = score_union(context, retrieved.legs, fusion.leg_candidates)
        lists = [ranked for leg in union.legs for ranked in leg.lists]
        revisions = {version.version_id: version.revision for version in knowledge.versions}
        scales = RelevanceScales(
            ceilings={key: value for leg in union.legs for key, value in leg.ceilings.items()},
            backgrounds=dense_backgrounds(union.legs, groups, revisions),
            version_ids=version_ids,
            graph_ceilings={key: value for leg in union.legs for key, value in leg.graph_ceilings.items()},
        )
        with timings.stage("fuse"):
            bridges = [bridge for leg in union.legs for bridge in leg.bridges]
            parents = parents_of(tenant, lists, any(v.chunking == PARENT_CHILD for v in knowledge.versions), bridges)
            fused = fuse(tenant, lists, {**retrieved.content_hashes, **parents.keys}, fusion, scales, bridges)
        documents = order_by_document(tenant, fused, fusion, timings)
        reranked = rerank(tenant, request.query, documents.candidates, requested=request.rerank, timings=timings)
        head = top_k_hits(reranked.candidates, request.top_k, fusion.group_by, documents.document_of)
        results = hydrate(
            tenant, request, head, reranked.scores, scales,
            legs=union.legs, document_scores=documents.scores, fused=fused, parents=parents,
        )  # fmt: skip
    explanation = explain(
        fusion=fusion, expansion=expansion, weights=weights, retrieved=retrieved, union=union, fused=fused,
        documents=documents, reranked=reranked,
    )  # fmt: skip
    response = SearchResponse(
        results=results,
        mode=request.mode,
        queries=explanation.queries,
        weights=weights.by_retriever,
        reranked=reranked.scores is not None,
        degraded=explanation.degraded,
        notes=[*explanation.notes, *read_notes()],  # replicas skipped (core.replicas)
        notices=explanation.notices,
        candidates=explanation.candidates,
        timings_ms=timings.milliseconds,
        critical_path_ms=timings.critical_path,
    )
    record_search(response.timings_ms, response.degraded)
    return response
