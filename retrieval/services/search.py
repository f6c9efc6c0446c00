"""The search pipeline behind every retrieval endpoint, one function per stage.

resolve the fusion settings (request, KBs, service: ``retrieval.tuning``) -> expand the query -> weigh
the retrievers -> retrieve (the query embeds and the keyword index searches on thread pools while the
request thread does the database work: BM25's reads, the vector plan, the graph; pgvector as soon as the
vectors are there, BM25's check as soon as its hits are, then its RM3 feedback pass when asked), each leg
scoped to the tenant, its active KB versions and the filters -> score the union (``leg_candidates``
"union": BM25 and dense each also rank the other's first hits) -> fuse (weighted RRF with per-query leg
weights, or normalized scores: ``retrieval.fusion``) -> order by document when asked (``retrieval.grouping``)
-> rerank the head -> cut top_k (one hit per document when grouped) -> hydrate.
Stages hand each other plain values; timings go through :class:`~retrieval.services.timings.StageTimings`.

The failure rule: anything an optional stage raises (the expansion, a leg of a search with another
leg, BM25's feedback pass, the union's scoring, the document stage, the reranker) becomes a ``degraded`` entry
``{"stage", "cause", "message"}`` and one warning; only when no retriever of the search answers is it an
error, a 503 naming the failed retriever.
"""
from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

import numpy as np
from cachetools import TTLCache
from django.conf import settings

from core.errors import DomainError
from core.metrics import record_circuit, record_search
from engines import get_lexical_index
from engines.analysis import Analyzer, detect_language
from engines.base import LexicalHit, LexicalIndexError, SearchScope
from engines.embedders import get_embedder
from engines.rerankers import get_reranker
from knowledge.selectors import SearchedKnowledge, SearchedVersion, SynonymRule, searched_knowledge, tenant_vocabulary
from knowledge.stores import vector_index
from retrieval import selectors
from retrieval.errors import EmbedderUnavailable, GraphUnavailable, LexicalIndexUnavailable, VectorIndexUnavailable
from retrieval.expansion import expand_query
from retrieval.expansion.base import QueryVariant
from retrieval.expansion.rm3 import Feedback, feedback_query
from retrieval.filters import CompiledFilter, compile_filters
from retrieval.fusion import (
    FusedCandidate,
    RankedList,
    min_max,
    reciprocal_rank_fusion,
    score_fusion,
    weighted_by_evidence,
)
from retrieval.grouping import Grouped, aggregate, group_by_document
from retrieval.services.graph import rank_by_graph
from retrieval.relevance import combined_relevance, dense_background, dense_relevance, lexical_relevance
from retrieval.services.timings import StageTimings
from retrieval.tuning import FusionSettings, effective_settings
from retrieval.types import (
    RETRIEVERS,
    Degradation,
    Expansion,
    LegResult,
    LexicalHits,
    LexicalQuery,
    ListQuery,
    ModelGroup,
    Reranked,
    SearchHit,
    SearchRequest,
    SearchResponse,
    Weights,
)
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# How deep (times the leg's candidates) a filtered BM25 search without the filter's chunk ids may go to
# find enough hits that pass: a filter matching more rows than LEXICAL_FILTER_MAX_IDS passes 0.1 % of
# the hits or more up to 50M chunks in scope (50,000 of them by default).
FILTERED_DEPTH_LIMIT = 1000

# The query's embedding and the keyword index's search run beside the request thread (torch, ONNX
# Runtime and tantivy release the GIL while they compute); the database work stays on the request
# thread and its one connection (a test's transaction included).
_embedding_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")
_lexical_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="lexical")


def search(tenant: Tenant, request: SearchRequest, knowledge: SearchedKnowledge | None = None) -> SearchResponse:
    """One search, uncached (``retrieval.cache.cached_search`` is the API's way in); records its metrics.
    ``knowledge``: what ``searched_knowledge`` read for this request (the cache key's read), else read here."""
    timings = StageTimings()
    with timings.stage("total"):
        compiled = compile_filters(request.filters)
        if knowledge is None:
            knowledge = searched_knowledge(tenant, request.kb_ids)
        fusion = searched_settings(request, knowledge)
        revisions = {version.version_id: version.revision for version in knowledge.versions}
        groups = model_groups(knowledge.versions)
        version_ids = tuple(version_id for group in groups for version_id in group.version_ids)
        candidates = fusion.candidates
        vocabulary = tenant_vocabulary(tenant.pk, knowledge.vocabulary_stamp)

        with timings.stage("expand"):
            expansion = expand(tenant, request, version_ids, vocabulary.synonyms)
        weights = weigh(request, groups, fusion)
        hops = settings.GRAPH_HOPS if request.hops is None else request.hops
        legs, known_hashes = _retrieve(
            tenant,
            groups,
            version_ids,
            expansion.variants,
            weights.by_retriever,
            compiled,
            vocabulary.analyzer,
            candidates,
            hops,
            fusion.feedback,
            timings,
        )
        found = _candidate_counts([ranked for leg in legs for ranked in leg.lists])
        union = score_union(tenant, groups, version_ids, legs, fusion.leg_candidates, timings)
        legs = union.legs
        lists = [ranked for leg in legs for ranked in leg.lists]
        for leg in legs:
            known_hashes.update(leg.content_hashes)
        ceilings = {key: value for leg in legs for key, value in leg.ceilings.items()}
        scales = RelevanceScales(ceilings, revisions)
        with timings.stage("fuse"):
            fused = fuse(tenant, lists, known_hashes, fusion, scales)
        documents = order_by_document(tenant, fused, fusion, timings)
        reranked = rerank(tenant, request.query, documents.candidates, requested=request.rerank, timings=timings)
        head = cut(reranked.candidates, request.top_k, fusion.group_by, documents.document_of)
        explanations = {leg.retriever: leg.explanations for leg in legs if leg.explanations}
        results = hydrate(
            tenant,
            request.mode,
            head.candidates,
            reranked.scores,
            single_list=len(lists) == 1,
            explanations=explanations,
            scales=scales,
            threshold=request.score_threshold,
            documents=DocumentView(
                documents.scores, head.passages, {c.chunk_id: c for c in fused} if head.passages else {}
            ),
        )
    response = SearchResponse(
        results=results,
        mode=request.mode,
        queries=[{"text": v.text, "weight": v.weight, "origin": v.origin} for v in expansion.variants],
        weights=weights.by_retriever,
        reranked=reranked.scores is not None,
        degraded=[
            *expansion.degraded,
            *(leg.failure.as_dict() for leg in legs if leg.failure),
            *union.degraded,
            *(degradation.as_dict() for leg in legs for degradation in leg.degraded),
            *documents.degraded,
            *reranked.degraded,
        ],
        notes=[*fusion.notes, *weights.notes, *(note for leg in legs for note in leg.notes)],
        candidates={**found, "fused": len(fused)},
        timings_ms=timings.milliseconds,
        critical_path_ms=timings.critical_path,
    )
    record_search(response.timings_ms, response.degraded)
    return response


# --- stages ---------------------------------------------------------------------------------------


def searched_settings(request: SearchRequest, knowledge: SearchedKnowledge) -> FusionSettings:
    """The fusion settings a search runs with: the request's, its KBs', the service's (``retrieval.tuning``)."""
    return effective_settings(request, [version.search_settings for version in knowledge.versions])


def model_groups(versions: Iterable[SearchedVersion]) -> list[ModelGroup]:
    """The searched versions grouped by embedding model, in the KBs' order."""
    grouped: dict[tuple[str, int], list[SearchedVersion]] = {}
    for version in versions:
        grouped.setdefault((version.embedding_model, version.embedding_dim), []).append(version)
    return [
        ModelGroup(
            model, dim, members[0].languages, tuple(v.version_id for v in members), tuple(v.revision for v in members)
        )
        for (model, dim), members in grouped.items()
    ]


def expand(
    tenant: Tenant, request: SearchRequest, version_ids: tuple[int, ...], synonyms: tuple[SynonymRule, ...]
) -> Expansion:
    """The query variants to search, the original first. ``expand_query`` turns whatever an expander
    raises into a degradation itself (stage ``expand``, naming the expander)."""
    expansion = expand_query(
        request.query, tenant=tenant, version_ids=version_ids, synonyms=synonyms, options=request.expand
    )
    return Expansion(expansion.variants, expansion.degraded)


def weigh(request: SearchRequest, groups: list[ModelGroup], fusion: FusionSettings) -> Weights:
    """Each retriever's weight (0: it does not run); dense retrieval is turned down to the floor when
    the query's language is one no searched model covers."""
    mode = request.mode
    weights = {name: (fusion.weights[name] if mode in (name, "hybrid") else 0.0) for name in RETRIEVERS}
    if mode == "hybrid" and not request.graph and "graph" not in (request.weights or {}):
        weights["graph"] = 0.0  # three-way hybrid is asked for: "graph": true or a graph weight
    notes = []
    if mode == "hybrid" and weights["vector"] > 0 and groups:
        language = detect_language(request.query)
        uncovered = [g for g in groups if g.languages and language not in g.languages]
        if len(uncovered) == len(groups):
            weights["vector"] = min(weights["vector"], fusion.dense_weight_floor)
            models = ", ".join(sorted({g.model_name for g in uncovered}))
            action = "skipped" if weights["vector"] == 0 else f"weighted {weights['vector']}"
            notes.append(
                f"dense retrieval {action}: the query is in '{language}', which the embedding model ({models}) "
                "does not cover"
            )
    return Weights(weights, notes)


def prepare_bm25(
    tenant: Tenant, version_ids: tuple[int, ...], compiled: CompiledFilter, analyzer: Analyzer, candidates: int
) -> LexicalQuery:
    """The BM25 leg's database reads, before the keyword index searches (the tenant's ``analyzer`` comes
    with its vocabulary): with filters, the chunk ids SQL says match (the source of truth for filters)
    for the index to search inside; when too many match, the index searches without them, ten times
    deeper, and its hits are filtered after (deeper again while too few pass)."""
    allowed, depth = None, candidates
    if compiled.q:
        allowed = selectors.filtered_chunk_ids(tenant, version_ids, compiled, settings.LEXICAL_FILTER_MAX_IDS)
        depth = candidates if allowed is not None else candidates * 10
    return LexicalQuery(analyzer, allowed, depth)


def search_keyword_index(
    tenant_id: int, version_ids: tuple[int, ...], variants: list[QueryVariant], query: LexicalQuery
) -> LexicalHits:
    """The keyword index's hits and BM25 ceilings per query variant. No database: it runs on the
    lexical pool, beside the embedding and the request thread's database work."""
    index = get_lexical_index()
    notes = _lexical_index_notes(index, version_ids, query.analyzer)
    hits, analyzed, ceilings = [], [], {}
    for variant in variants:
        tokens = query.analyzer.tokens(variant.text)
        hits.append(_bm25_hits(index, tenant_id, version_ids, tokens, query.depth, query.allowed))
        analyzed.append(tokens)
        for version_id in version_ids:
            ceilings[variant.text, version_id] = index.max_score(version_id, tokens)
    return LexicalHits(hits, analyzed, ceilings, notes)


def check_bm25(
    tenant: Tenant,
    version_ids: tuple[int, ...],
    variants: list[QueryVariant],
    weight: float,
    compiled: CompiledFilter,
    candidates: int,
    query: LexicalQuery,
    found: LexicalHits,
) -> LegResult:
    """One BM25 list per query variant, of the index's hits the chunk table confirms (they exist and
    pass the filters; searched inside the allowed ids, they need no check)."""
    index = get_lexical_index()
    lists, queries, hashes = [], [], {}
    for variant, hits, tokens in zip(variants, found.hits, found.tokens, strict=True):
        if query.allowed is None:
            hits = _bm25_hits_of_existing_chunks(
                index, tenant, version_ids, tokens, hits, query.depth, compiled, candidates, hashes
            )
        ranked = [(hit.chunk_id, hit.score) for hit in hits[:candidates]]
        lists.append(RankedList("bm25", variant.text, weight * variant.weight, ranked))
        queries.append(ListQuery(tokens=tokens))
    return LegResult(
        "bm25", lists=lists, queries=queries, content_hashes=hashes, ceilings=found.ceilings, notes=found.notes
    )


def feed_back_bm25(
    tenant: Tenant,
    version_ids: tuple[int, ...],
    leg: LegResult,
    compiled: CompiledFilter,
    candidates: int,
    query: LexicalQuery,
    feedback: Feedback,
) -> LegResult:
    """The BM25 leg searched again with each variant's RM3 query (``retrieval.expansion.rm3``): the
    words of its first list's top ``feedback.docs`` passages (as indexed: with their context), weighted
    and mixed with the query's own. The lists keep their variant's text (and its BM25 ceiling becomes
    the weighted query's, so ``relevance`` stays a share of the most the query could score)."""
    index = get_lexical_index()
    top = {chunk_id for ranked in leg.lists for chunk_id, _ in ranked.hits[: feedback.docs]}
    texts = selectors.indexed_texts(tenant, list(top))
    lists, queries, ceilings, hashes = [], [], dict(leg.ceilings), dict(leg.content_hashes)
    for ranked, first in zip(leg.lists, leg.queries, strict=True):
        passages = [
            (query.analyzer.tokens(texts[chunk_id]), score)
            for chunk_id, score in ranked.hits[: feedback.docs]
            if chunk_id in texts
        ]
        weighted = feedback_query(first.tokens, passages, feedback)
        hits = _bm25_hits(index, tenant.pk, version_ids, weighted.tokens, query.depth, query.allowed, weighted.weights)
        if query.allowed is None:
            hits = _bm25_hits_of_existing_chunks(
                index, tenant, version_ids, weighted.tokens, hits, query.depth, compiled, candidates, hashes,
                weighted.weights,
            )  # fmt: skip
        lists.append(replace(ranked, hits=[(hit.chunk_id, hit.score) for hit in hits[:candidates]]))
        queries.append(ListQuery(tokens=weighted.tokens, token_weights=weighted.weights))
        for version_id in version_ids:
            ceilings[ranked.query, version_id] = index.max_score(version_id, weighted.tokens, weighted.weights)
    return replace(leg, lists=lists, queries=queries, content_hashes=hashes, ceilings=ceilings)


def _bm25_hits(
    index, tenant_id: int, version_ids, tokens: list[str], depth: int, allowed, weights: list[float] | None = None
) -> list[LexicalHit]:
    hits = []
    for version_id in version_ids:
        hits += index.search(version_id, tenant_id, tokens, depth, allowed, weights)
    hits.sort(key=lambda hit: -hit.score)
    return hits


def _bm25_hits_of_existing_chunks(
    index,
    tenant: Tenant,
    version_ids,
    tokens: list[str],
    hits: list[LexicalHit],
    depth: int,
    compiled: CompiledFilter,
    candidates: int,
    hashes: dict[int, str],
    weights: list[float] | None = None,
) -> list[LexicalHit]:
    """Of the index's ``hits`` (searched to ``depth``), those whose chunk exists (and passes the
    filters), checked against the chunk table; the kept hits' content hashes are added to ``hashes``.

    An index entry whose chunk is gone (a change committed but not yet applied to the keyword index,
    see ``knowledge.services.apply_pending_lexical_changes``) is dropped, and without filters the
    search goes deeper by as many entries, so such an entry never takes a real chunk's place. With
    filters (more rows match them than ``LEXICAL_FILTER_MAX_IDS``) only a share of the hits pass, so
    the search goes ten times deeper until ``candidates`` pass, the index has no more hits, or it is
    :data:`FILTERED_DEPTH_LIMIT` times ``candidates`` deep: the same hits as a search inside the
    filter's chunk ids, without reading them (docs/BENCHMARKS.md, "Scale to 1M chunks")."""
    while True:
        passing = selectors.hashes_of_chunks_passing(tenant, [hit.chunk_id for hit in hits], compiled)
        kept = [hit for hit in hits if hit.chunk_id in passing]
        if compiled.q:
            deeper = min(depth * 10, candidates * FILTERED_DEPTH_LIMIT)
        else:
            deeper = candidates + len(hits) - len(kept)
        if len(kept) >= candidates or len(hits) < depth or deeper <= depth:  # enough, or no more to find
            break
        depth = deeper
        hits = _bm25_hits(index, tenant.pk, version_ids, tokens, depth, None, weights)
    hashes.update(passing)
    if not compiled.q and len(kept) < len(hits):
        logger.warning(
            "the keyword index of KB versions %s holds %d entries for chunks not in the database; "
            "`manage.py check_kb --repair` removes them if they stay",
            list(version_ids), len(hits) - len(kept),
        )  # fmt: skip
    return kept


def retrieve_graph(
    tenant: Tenant,
    version_ids: tuple[int, ...],
    query: str,
    weight: float,
    compiled: CompiledFilter,
    candidates: int,
    hops: int,
) -> LegResult:
    """One list from the query's entities and their neighbourhood (the original query only: synonym
    groups are already entity aliases); each hit keeps the path that found it."""
    ranking = rank_by_graph(tenant.pk, version_ids, query, hops=hops)
    hits, passing = ranking.hits, {}
    if compiled.q and hits:
        passing = selectors.hashes_of_chunks_passing(tenant, [chunk_id for chunk_id, _ in hits], compiled)
        hits = [hit for hit in hits if hit[0] in passing]
    hits = hits[:candidates]
    explanations = {chunk_id: ranking.paths[chunk_id] for chunk_id, _ in hits}
    return LegResult(
        "graph", lists=[RankedList("graph", query, weight, hits)], content_hashes=passing, notes=ranking.notes,
        explanations=explanations,
    )  # fmt: skip


def embed(groups: list[ModelGroup], texts: list[str]) -> dict[str, np.ndarray]:
    """The query variants' vectors under each group's model (runs on the embedding pool)."""
    return {group.model_name: get_embedder(group.model_name).embed_queries(texts) for group in groups}


def plan_vector(tenant: Tenant, groups: list[ModelGroup], compiled: CompiledFilter) -> list[object | None]:
    """The vector index's per-group plans: work that needs no query vector, done while it embeds, or
    remembered from an earlier search of the same versions at the same revisions with the same filters."""
    index = vector_index()
    return [_vector_plan(index, tenant, group, compiled) for group in groups]


# The dense leg's plan (how many rows are in scope, exact scan or HNSW) per tenant, versions at their
# revisions, dimension and filters: the rows in a version's scope change only with its revision. Only
# plans that found rows are kept: a stale one only steers exact vs HNSW, which both return every match
# (the walk falls back to exact), where a stale "none" would hide new rows. The TTL follows the index's
# size, which moves the exact-scan limit (``engines.pgvector_index``: re-read every 60 s).
_vector_plans: TTLCache = TTLCache(maxsize=10_000, ttl=60)
_vector_plans_lock = threading.Lock()


def _vector_plan(index, tenant: Tenant, group: ModelGroup, compiled: CompiledFilter) -> object | None:
    filters = compiled.sql
    key = (tenant.pk, group.version_ids, group.revisions, group.dimension, filters.sql, repr(filters.params))
    with _vector_plans_lock:
        plan = _vector_plans.get(key)
    if plan is None:
        plan = index.plan(_scope(tenant, group), filters)
        if plan:
            with _vector_plans_lock:
                _vector_plans[key] = plan
    return plan


def retrieve_vector(
    tenant: Tenant,
    groups: list[ModelGroup],
    variants: list[QueryVariant],
    vectors: dict[str, np.ndarray],
    weight: float,
    compiled: CompiledFilter,
    plans: list[object | None],
    candidates: int,
) -> LegResult:
    """One dense list per query variant, over every model group; keeps the content hashes pgvector returns."""
    index = vector_index()
    lists, queries, hashes = [], [], {}
    for i, variant in enumerate(variants):
        hits = []
        for group, plan in zip(groups, plans, strict=True):
            hits += index.search(_scope(tenant, group), vectors[group.model_name][i], candidates, compiled.sql, plan)
        hits.sort(key=lambda hit: -hit.score)
        hashes.update((hit.chunk_id, hit.content_hash) for hit in hits if hit.content_hash is not None)
        ranked = [(hit.chunk_id, hit.score) for hit in hits[:candidates]]
        lists.append(RankedList("vector", variant.text, weight * variant.weight, ranked))
        queries.append(ListQuery(vectors={group.model_name: vectors[group.model_name][i] for group in groups}))
    return LegResult("vector", lists=lists, queries=queries, content_hashes=hashes)


@dataclass(frozen=True)
class UnionScored:
    legs: list[LegResult]
    degraded: list[dict]


# The head of each leg's list that the other leg scores: on half of SciFact train (even query ids) the
# union of the heads ranks as well at 10, 20 and 30 as the whole union (100 each), at a tenth of the reads
# (docs/BENCHMARKS.md, "The candidate union scored by both legs").
UNION_HEAD = 10


def score_union(
    tenant: Tenant,
    groups: list[ModelGroup],
    version_ids: tuple[int, ...],
    legs: list[LegResult],
    leg_candidates: str,
    timings: StageTimings,
) -> UnionScored:
    """``leg_candidates`` "union": every BM25 and dense list also ranks the other leg's first
    ``UNION_HEAD`` passages it did not find, scored as it would have scored them (the dense cosine of
    BM25's, read by id; the BM25 score of the dense leg's, the keyword index searched inside their ids:
    no match, no entry). A passage one leg ranks high then gets the other leg's rank too, where it had
    none: fusion by rank no longer treats "not in this leg's top ``candidates``" as "ranked last". No
    second search; the graph's list stays as found. On any failure the lists as found, degraded."""
    scorable = [leg for leg in legs if leg.retriever in CALIBRATED and leg.lists and not leg.failure]
    if leg_candidates != "union" or len(scorable) < 2:  # one leg: its lists are the union
        return UnionScored(legs, [])
    union = {chunk_id for leg in scorable for ranked in leg.lists for chunk_id, _ in ranked.hits[:UNION_HEAD]}
    bm25, vector = sorted(scorable, key=lambda leg: leg.retriever)
    # The keyword index (no database) on the lexical pool while this thread reads the dense scores.
    lexical = _in_pool(_lexical_pool, timings, "union", _leg_over, tenant, groups, version_ids, bm25, union)
    with timings.stage("union"):
        try:
            dense = _leg_over(tenant, groups, version_ids, vector, union)
            scored = {"bm25": lexical.result(), "vector": dense}
        except Exception as exc:
            return UnionScored(legs, [degradation_of("union", exc).as_dict()])
    return UnionScored([scored.get(leg.retriever, leg) for leg in legs], [])


def _leg_over(
    tenant: Tenant, groups: list[ModelGroup], version_ids: tuple[int, ...], leg: LegResult, union: set[int]
) -> LegResult:
    """The leg with each list extended to the ``union``'s passages it scores, best first."""
    lists = []
    index = vector_index() if leg.retriever == "vector" else get_lexical_index()
    for ranked, query in zip(leg.lists, leg.queries, strict=True):
        missing = sorted(union - {chunk_id for chunk_id, _ in ranked.hits})
        if leg.retriever == "vector":
            scored = [
                (hit.chunk_id, hit.score)
                for group in groups
                for hit in index.similarities(_scope(tenant, group), query.vectors[group.model_name], missing)
            ]
        else:
            hits = _bm25_hits(index, tenant.pk, version_ids, query.tokens, len(missing), missing, query.token_weights)
            scored = [(hit.chunk_id, hit.score) for hit in hits]
        lists.append(replace(ranked, hits=sorted([*ranked.hits, *scored], key=lambda hit: -hit[1])))
    return replace(leg, lists=lists)


def fuse(
    tenant: Tenant,
    lists: list[RankedList],
    known_hashes: dict[int, str],
    fusion: FusionSettings,
    scales: RelevanceScales,
) -> list[FusedCandidate]:
    """Weighted RRF, or the weighted sum of each list's scores normalized (``fusion.fusion``: see
    ``retrieval.fusion``), deduplicated by content hash; hits deleted since their index returned them drop out.
    The graph's list is gated (:func:`gate_graph`) against the other lists' top ``GRAPH_FUSION_HEAD``."""
    hit_ids = {chunk_id for ranked in lists for chunk_id, _ in ranked.hits}
    hashes = {**known_hashes, **selectors.content_hashes(hit_ids - known_hashes.keys())}
    present = [
        RankedList(ranked.retriever, ranked.query, ranked.weight, [hit for hit in ranked.hits if hit[0] in hashes])
        for ranked in lists
    ]
    gate = gate_graph(present, settings.GRAPH_FUSION_HEAD, hashes)
    fused = _fused_by(tenant, gate.lists, hashes, fusion, scales)
    if not gate.head:
        return fused
    # The vote of the graph's first hit: 1 / (k + 1) by rank, 1 on a min-max scale (a graph list has no
    # calibrated relevance, so both score fusions scale it by its own range).
    lift = gate.weight / (fusion.rrf_k + 1) if fusion.fusion == "rrf" else gate.weight
    for candidate in fused:
        if candidate.key in gate.head:
            candidate.fused_score += lift
    return sorted(fused, key=lambda candidate: -candidate.fused_score)  # stable: ties keep the fusion's order


def _fused_by(
    tenant: Tenant, lists: list[RankedList], hashes: dict[int, str], fusion: FusionSettings, scales: RelevanceScales
) -> list[FusedCandidate]:
    if fusion.fusion == "rrf":
        if fusion.leg_weights == "evidence":
            lists = weighted_by_evidence(lists, _first_hit_relevance(tenant, lists, scales))
        return reciprocal_rank_fusion(lists, k=fusion.rrf_k, dedup_key=hashes.__getitem__)
    if fusion.fusion == "minmax":
        return score_fusion(lists, min_max, dedup_key=hashes.__getitem__)
    version_of = _versions_of(tenant, {chunk_id for ranked in lists for chunk_id, _ in ranked.hits}, scales)

    def relevance(ranked: RankedList) -> list[float]:
        """The calibrated relevance of each hit, by the list's retriever; min-max for a retriever without one."""
        if ranked.retriever not in CALIBRATED:
            return min_max(ranked)
        return [
            scales.leg_relevance(ranked, score, version_of[chunk_id]) if chunk_id in version_of else 0.0
            for chunk_id, score in ranked.hits
        ]  # a chunk without a version was deleted since: hydrate drops it

    return score_fusion(lists, relevance, dedup_key=hashes.__getitem__)


def _first_hit_relevance(
    tenant: Tenant, lists: list[RankedList], scales: RelevanceScales
) -> Callable[[RankedList], float | None]:
    """Each list's evidence for per-query weights: its first hit's calibrated relevance; None for a
    retriever without a calibrated scale (the graph), 0.0 for an empty list."""
    version_of = _versions_of(tenant, {ranked.hits[0][0] for ranked in lists if ranked.hits}, scales)

    def evidence(ranked: RankedList) -> float | None:
        if ranked.retriever not in CALIBRATED:
            return None
        if not ranked.hits or ranked.hits[0][0] not in version_of:  # none, or deleted since
            return 0.0
        chunk_id, score = ranked.hits[0]
        return scales.leg_relevance(ranked, score, version_of[chunk_id])

    return evidence


def _versions_of(tenant: Tenant, chunk_ids: set[int], scales: RelevanceScales) -> dict[int, int]:
    """Each chunk's KB version (one searched version needs no lookup); a deleted chunk is absent."""
    versions = list(scales.revisions)
    if len(versions) == 1:
        return dict.fromkeys(chunk_ids, versions[0])
    return selectors.chunk_versions(tenant, chunk_ids)


@dataclass(frozen=True)
class GraphGate:
    lists: list[RankedList]  # the lists to fuse: the graph's without the others' heads
    head: frozenset[str]  # content hashes of the passages in another list's top GRAPH_FUSION_HEAD
    weight: float  # the graph list's weight


def gate_graph(lists: list[RankedList], head: int, hashes: dict[int, str]) -> GraphGate:
    """Three-way hybrid: the graph reorders and extends what lies below the other legs' heads, never
    the heads. BM25 and dense found a passage in their top ``head`` by the query's own words; the
    graph's opinion of it, built from the nouns it shares with the query, is what reordered a
    near-perfect head (docs/BENCHMARKS.md, "Graph retrieval"). So every passage (by content hash) in
    another list's top ``head`` scores as if the graph ranked it first, whether the graph found it or
    not (``fuse`` adds that vote): a head keeps its order, and nothing below it passes it by the graph's
    vote alone. The graph's own list keeps its other passages, ranked among themselves: those it
    reached through the query's entities that the others rank low or not at all. ``head`` 0: no gate,
    the graph votes for every passage it ranks."""
    graph = [ranked for ranked in lists if ranked.retriever == "graph"]
    if not head or not graph or len(graph) == len(lists):  # no gate, no graph list, or the graph alone
        return GraphGate(lists, frozenset(), 0.0)
    protected = frozenset(
        hashes[chunk_id] for ranked in lists if ranked.retriever != "graph" for chunk_id, _ in ranked.hits[:head]
    )
    gated = [
        replace(ranked, hits=[hit for hit in ranked.hits if hashes[hit[0]] not in protected])
        if ranked.retriever == "graph"
        else ranked
        for ranked in lists
    ]
    return GraphGate(gated, protected, max(ranked.weight for ranked in graph))


def order_by_document(
    tenant: Tenant, fused: list[FusedCandidate], fusion: FusionSettings, timings: StageTimings
) -> DocumentOrder:
    """The chunks of one document counted together (``retrieval.grouping``); documents are looked up
    only when the search aggregates or groups. On any failure the fused order, degraded."""
    if fusion.aggregate == "none" and fusion.group_by == "chunk":
        return DocumentOrder(fused, {}, {}, [])
    with timings.stage("group"):
        try:
            document_of = selectors.document_ids(tenant, [candidate.chunk_id for candidate in fused])
            ranked, scores = aggregate(fused, document_of, fusion.aggregate)
        except Exception as exc:
            return DocumentOrder(fused, {}, {}, [degradation_of("group", exc).as_dict()])
    return DocumentOrder(ranked, scores, document_of, [])


def cut(candidates: list[FusedCandidate], top_k: int, group_by: str, document_of: dict[int, int]) -> Grouped:
    """The ``top_k`` hits: chunks, or (``group_by`` document) each document's best chunk and its passages."""
    if group_by == "document":
        grouped = group_by_document(candidates, document_of)
        return Grouped(grouped.candidates[:top_k], grouped.passages)
    return Grouped(candidates[:top_k], {})


def rerank(
    tenant: Tenant, query: str, fused: list[FusedCandidate], *, requested: bool, timings: StageTimings
) -> Reranked:
    """The head (``RERANK_TOP_N``) reordered by the reranker; on any failure the fused order, degraded."""
    if not requested:
        return Reranked(fused, None, [])
    with timings.stage("rerank"):
        head = fused[: settings.RERANK_TOP_N]
        try:
            reranker = get_reranker()
            if reranker is None:
                message = "reranking was requested but no reranker is configured"
                return Reranked(fused, None, [_degraded("rerank", "not_configured", message).as_dict()])
            contents = selectors.chunk_contents(tenant, [candidate.chunk_id for candidate in head])
            try:
                scores = reranker.rerank(query, [contents[candidate.chunk_id] for candidate in head])
            finally:
                record_circuit("reranker", reranker.circuit_open)  # its breaker moves only on a call
            by_chunk = {candidate.chunk_id: score for candidate, score in zip(head, scores, strict=True)}
        except Exception as exc:
            return Reranked(fused, None, [degradation_of("rerank", exc).as_dict()])
    reordered = sorted(head, key=lambda candidate: -by_chunk[candidate.chunk_id]) + fused[len(head) :]
    return Reranked(reordered, by_chunk, [])


@dataclass(frozen=True)
class DocumentOrder:
    candidates: list[FusedCandidate]
    scores: dict[int, float]  # chunk id -> its document's aggregated score; empty: not aggregated
    document_of: dict[int, int]  # chunk id -> document id; empty: not looked up
    degraded: list[dict]


@dataclass(frozen=True)
class DocumentView:
    """What a hit shows of its document: the aggregated score and (grouped) its other passages."""

    scores: dict[int, float]
    passages: dict[int, list[int]]  # hit chunk id -> other chunk ids of its document, best first
    fused: dict[int, FusedCandidate]


# The retrievers whose scores ``relevance`` calibrates (the graph's are not: its list is min-max normalized).
CALIBRATED = ("vector", "bm25")


@dataclass(frozen=True)
class RelevanceScales:
    """What maps a hit's raw scores onto ``relevance`` (``retrieval.relevance``): the BM25 ceiling per
    (query variant, KB version), and each searched version's revision (its dense background's key)."""

    ceilings: dict[tuple[str, int], float]
    revisions: dict[int, int]

    def relevance(self, candidate: FusedCandidate, version_id: int) -> float:
        dense = lexical = None
        if (vector := candidate.retrievers.get("vector")) is not None:
            dense = self.dense(vector.score, version_id)
        if (bm25 := candidate.retrievers.get("bm25")) is not None:
            lexical = self.lexical(bm25.score, bm25.query, version_id)
        return combined_relevance(dense, lexical)

    def leg_relevance(self, ranked: RankedList, score: float, version_id: int) -> float:
        """One hit's relevance by its own list's retriever (``vector`` or ``bm25``)."""
        if ranked.retriever == "vector":
            return self.dense(score, version_id)
        return self.lexical(score, ranked.query, version_id)

    def dense(self, cosine: float, version_id: int) -> float:
        return dense_relevance(cosine, dense_background(version_id, self.revisions[version_id]))

    def lexical(self, score: float, query: str, version_id: int) -> float:
        return lexical_relevance(score, self.ceilings.get((query, version_id), 0.0))


def hydrate(
    tenant: Tenant,
    mode: str,
    candidates: list[FusedCandidate],
    rerank_scores: dict[int, float] | None,
    *,
    single_list: bool,
    scales: RelevanceScales,
    threshold: float = 0.0,
    explanations: dict[str, dict[int, dict]] | None = None,
    documents: DocumentView | None = None,
) -> list[SearchHit]:
    """The hits as the API shows them, those under the ``relevance`` threshold left out. One retriever
    and one query (``single_list``): its raw score (cosine or BM25) is the most useful score to show.
    ``explanations``: retriever -> chunk id -> what that retriever adds to the hit's entry in
    ``retrievers`` (the graph: its path)."""
    explanations = explanations or {}
    documents = documents or DocumentView({}, {}, {})
    by_id = selectors.chunks_with_documents(tenant, [candidate.chunk_id for candidate in candidates])
    passages = selectors.passages(tenant, [chunk_id for ids in documents.passages.values() for chunk_id in ids])
    results = []
    for candidate in candidates:
        chunk = by_id.get(candidate.chunk_id)
        if chunk is None:  # replaced by a concurrent re-ingest between two reads
            continue
        relevance = round(scales.relevance(candidate, chunk.kb_version_id), 6)  # as shown, as thresholded
        if relevance < threshold:
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
                content=chunk.content,
                score=round(float(score), 6),
                source=mode,
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
                document_score=_rounded(documents.scores.get(candidate.chunk_id)),
                passages=None
                if candidate.chunk_id not in documents.passages
                else [
                    {
                        "chunk_id": chunk_id,
                        "content": passages[chunk_id][0],
                        "ordinal": passages[chunk_id][1],
                        "fused_score": round(documents.fused[chunk_id].fused_score, 6),
                    }
                    for chunk_id in documents.passages[candidate.chunk_id]
                    if chunk_id in passages  # else replaced by a concurrent re-ingest
                ],
            )
        )
    return results


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


# --- the retrieval legs and their failures ----------------------------------------------------------


def _retrieve(
    tenant: Tenant,
    groups: list[ModelGroup],
    version_ids: tuple[int, ...],
    variants: list[QueryVariant],
    weights: dict[str, float],
    compiled: CompiledFilter,
    analyzer: Analyzer,
    candidates: int,
    hops: int,
    feedback: Feedback,
    timings: StageTimings,
) -> tuple[list[LegResult], dict[int, str]]:
    """The legs that ran (BM25, graph, vector, in that order), and the content hashes of the graph's
    hits, looked up while the others run. The query embeds on the embedding pool and the keyword index
    searches on the lexical pool while this (the request) thread does the database work: BM25's reads,
    the vector plan, the graph; then whichever pool answers first is finished first (pgvector as soon
    as the vectors are there, BM25's check as soon as its hits are). Raises the last failed leg's
    error when no leg answers."""
    embedding = lexical = None
    if weights["vector"] > 0:
        embedding = _in_pool(_embedding_pool, timings, "embed", embed, groups, [v.text for v in variants])
    legs: dict[str, LegResult] = {}
    query: LexicalQuery | None = None
    if weights["bm25"] > 0:
        with timings.stage("bm25"):
            try:
                query = prepare_bm25(tenant, version_ids, compiled, analyzer, candidates)
            except Exception as exc:
                legs["bm25"] = _failed_leg("bm25", exc, LexicalIndexUnavailable, "keyword search is unavailable")
        if query is not None:  # submitted outside the stage, so its span is the search's child like the others
            lexical = _in_pool(
                _lexical_pool, timings, "bm25", search_keyword_index, tenant.pk, version_ids, variants, query
            )
    plans: list[object | None] = []
    plan_error: Exception | None = None
    if embedding is not None:
        with timings.stage("vector"):  # sizes the vector scope: needs no query vector
            try:
                plans = plan_vector(tenant, groups, compiled)
            except Exception as exc:
                plan_error = exc
    known_hashes: dict[int, str] = {}
    if weights["graph"] > 0:
        with timings.stage("graph"):
            try:
                original = variants[0].text
                legs["graph"] = retrieve_graph(tenant, version_ids, original, weights["graph"], compiled, candidates, hops)
            except Exception as exc:
                legs["graph"] = _failed_leg("graph", exc, GraphUnavailable, "graph search is unavailable")
        with timings.stage("fuse"):  # the graph hits' hashes the leg did not bring along
            graph = legs["graph"]
            hit_ids = {chunk_id for ranked in graph.lists for chunk_id, _ in ranked.hits}
            known_hashes = selectors.content_hashes(hit_ids - graph.content_hashes.keys())
    pending = {future: name for future, name in ((embedding, "embed"), (lexical, "bm25")) if future is not None}
    while pending:
        since = time.perf_counter()
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        future = next(iter(done))
        stage = pending.pop(future)
        timings.waited(stage, since)
        if stage == "bm25":
            legs["bm25"] = _finish_bm25(
                tenant, version_ids, variants, weights["bm25"], compiled, candidates, query, feedback, future, timings
            )
        else:
            legs["vector"] = _finish_vector(
                tenant, groups, variants, weights["vector"], compiled, plans, plan_error, candidates, future, timings
            )
    ran = [legs[name] for name in ("bm25", "graph", "vector") if name in legs]
    if ran and all(leg.failure for leg in ran):
        raise ran[-1].unavailable
    return ran, known_hashes


def _in_pool(pool: ThreadPoolExecutor, timings: StageTimings, stage: str, function, *args) -> Future:
    """``function(*args)`` on ``pool``, timed as ``stage``, in a copy of the request's context (so its
    log lines carry the request id and its span is the request's child)."""

    def staged():
        with timings.stage(stage):
            return function(*args)

    return pool.submit(contextvars.copy_context().run, staged)


def _finish_bm25(
    tenant, version_ids, variants, weight, compiled, candidates, query, feedback: Feedback, searched: Future, timings
) -> LegResult:
    """The BM25 leg once the keyword index answered: its hits checked, or its failure; then its feedback
    pass when asked (whose failure leaves the first pass's lists, degraded)."""
    with timings.stage("bm25"):
        try:
            leg = check_bm25(tenant, version_ids, variants, weight, compiled, candidates, query, searched.result())
        except Exception as exc:
            return _failed_leg("bm25", exc, LexicalIndexUnavailable, "keyword search is unavailable")
    if not feedback.enabled:
        return leg
    with timings.stage("feedback"):
        try:
            return feed_back_bm25(tenant, version_ids, leg, compiled, candidates, query, feedback)
        except Exception as exc:
            return replace(leg, degraded=[*leg.degraded, degradation_of("feedback", exc)])


def _finish_vector(
    tenant, groups, variants, weight, compiled, plans, plan_error: Exception | None, candidates, embedding: Future, timings
) -> LegResult:
    """The vector leg once the query embedded: pgvector searched, or the embedding's (or the plan's) failure."""
    try:
        vectors = embedding.result()
    except Exception as exc:
        return _failed_leg("vector", exc, EmbedderUnavailable, "cannot embed the query")
    if plan_error is not None:
        return _failed_leg("vector", plan_error, VectorIndexUnavailable, "vector search is unavailable")
    with timings.stage("vector"):
        try:
            return retrieve_vector(tenant, groups, variants, vectors, weight, compiled, plans, candidates)
        except Exception as exc:
            return _failed_leg("vector", exc, VectorIndexUnavailable, "vector search is unavailable")


def _failed_leg(retriever: str, exc: Exception, unavailable: type[DomainError], summary: str) -> LegResult:
    """A leg that raised: a degradation, or the ``unavailable`` error when no other leg answers."""
    failure = degradation_of(retriever, exc)
    return LegResult(retriever, failure=failure, unavailable=unavailable(f"{summary}: {failure.message}"))


def degradation_of(stage: str, exc: Exception) -> Degradation:
    """What an exception of an optional stage becomes: its own ``cause`` and message when it is a
    typed engine error, else ``internal_error`` as the expansion says it (the details, traceback
    included, go to the log, not to the client)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, str) and cause:
        return _degraded(stage, cause, getattr(exc, "message", None) or str(exc))
    message = f"unexpected {type(exc).__name__}; details are in the service log"
    return _degraded(stage, "internal_error", message, exc)


def _degraded(stage: str, cause: str, message: str, exc: Exception | None = None) -> Degradation:
    """The one warning a degradation logs (the request id comes from the logging filter)."""
    logger.warning("search degraded", extra={"stage": stage, "cause": cause, "detail": message}, exc_info=exc)
    return Degradation(stage, cause, message)


def _lexical_index_notes(index, version_ids: tuple[int, ...], analyzer) -> list[str]:
    """Raises when an index was built by another analyzer version (its tokens would not match);
    a note when only the custom dictionary changed since."""
    notes = []
    for version_id in version_ids:
        state = index.state(version_id)
        if state is None:
            continue
        if state.analyzer_version != analyzer.version:
            raise LexicalIndexError(
                "stale_index",
                f"the keyword index of KB version {version_id} was built with analyzer {state.analyzer_version}, "
                f"the service runs {analyzer.version}: run `manage.py rebuild_lexical_index`",
            )
        if state.dictionary_fingerprint != analyzer.dictionary_fingerprint:
            notes.append(
                f"the custom dictionary changed since KB version {version_id} was indexed; "
                "run `manage.py rebuild_lexical_index` so protected terms match in full"
            )
    return notes


def _scope(tenant: Tenant, group: ModelGroup) -> SearchScope:
    return SearchScope(tenant.pk, group.version_ids, group.dimension)


def _candidate_counts(lists: list[RankedList]) -> dict[str, int]:
    chunk_ids: dict[str, set[int]] = {}
    for ranked in lists:
        chunk_ids.setdefault(ranked.retriever, set()).update(chunk_id for chunk_id, _ in ranked.hits)
    return {retriever: len(ids) for retriever, ids in chunk_ids.items()}
