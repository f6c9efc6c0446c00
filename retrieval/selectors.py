"""The search pipeline behind every retrieval endpoint.

expand the query -> retrieve (BM25 while the query embeds, then pgvector), each leg scoped to the
tenant, its active KB versions and the filters -> fuse by weighted RRF -> rerank the head -> hydrate.
A failing optional part (an expander, a leg of a hybrid search, the reranker) degrades the answer
and is named in ``degraded``; it never turns a search into an error.
"""
from __future__ import annotations

import contextvars
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from django.conf import settings

from knowledge.models import Chunk, KnowledgeBase
from knowledge.selectors import analyzer_for_tenant, searchable_knowledge_bases
from knowledge.stores import vector_index
from engines.analysis import detect_language
from engines.embedders import EmbeddingError, get_embedder
from engines import get_lexical_index
from engines.base import LexicalIndexError, SearchScope
from retrieval.errors import EmbedderUnavailable, LexicalIndexUnavailable
from retrieval.expansion import ExpansionOptions, expand_query
from retrieval.expansion.base import QueryVariant
from retrieval.filters import CompiledFilter, compile_filters
from retrieval.fusion import FusedCandidate, RankedList, reciprocal_rank_fusion
from core.metrics import record_search
from engines.rerankers import get_reranker
from engines.rerankers.base import RerankError
from tenants.models import Tenant

logger = logging.getLogger(__name__)

MODES = ("vector", "bm25", "hybrid")
RETRIEVERS = ("vector", "bm25")

# Embedding runs beside BM25; torch releases the GIL while it computes.
_embedding_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")


@dataclass
class SearchRequest:
    query: str
    mode: str = "hybrid"
    top_k: int = 10
    kb_ids: list[int] | None = None
    filters: dict | None = None
    weights: dict[str, float] | None = None
    candidates: int | None = None
    rrf_k: int | None = None
    rerank: bool = False
    expand: ExpansionOptions = field(default_factory=lambda: ExpansionOptions(synonyms=False, spelling=False, llm=False))


@dataclass
class SearchHit:
    chunk_id: int
    doc_id: int
    kb_id: int
    content: str
    score: float
    source: str
    rank: int
    title: str
    source_uri: str
    doc_type: str
    metadata: dict
    fused_score: float | None = None
    rerank_score: float | None = None
    retrievers: dict = field(default_factory=dict)
    matched_queries: list[str] = field(default_factory=list)


@dataclass
class SearchResponse:
    results: list[SearchHit]
    mode: str
    queries: list[dict]
    weights: dict[str, float]
    reranked: bool
    degraded: list[dict]
    notes: list[str]
    candidates: dict[str, int]
    timings_ms: dict[str, float]

    def as_dict(self) -> dict:
        """Shallow: fields and hits are shared, not copied (``asdict`` deep-copies some 600 objects
        a response, a quarter of the cost of answering from the cache)."""
        return {**vars(self), "results": [dict(vars(hit)) for hit in self.results]}


@dataclass
class _Group:
    """KB versions searched together: same embedding model, so one query vector serves them."""

    model_name: str
    dimension: int
    languages: tuple[str, ...]
    version_ids: list[int] = field(default_factory=list)


class _Timer:
    def __init__(self):
        self.timings: dict[str, float] = {}

    def add(self, stage: str, started: float) -> None:
        self.timings[stage] = round(self.timings.get(stage, 0.0) + (time.perf_counter() - started) * 1000, 3)


def search(tenant: Tenant, request: SearchRequest) -> SearchResponse:
    response = _Search(tenant, request).run()
    record_search(response.timings_ms, response.degraded)
    return response


class _Search:
    def __init__(self, tenant: Tenant, request: SearchRequest):
        self.tenant, self.request = tenant, request
        self.timer = _Timer()
        self.degraded: list[dict] = []
        self.notes: list[str] = []
        self.candidates = request.candidates or settings.SEARCH_CANDIDATES
        self.rrf_k = request.rrf_k or settings.RRF_K
        self._known_hashes: dict[int, str] = {}  # chunk id -> content hash, for dedup in fusion

    def run(self) -> SearchResponse:
        started = time.perf_counter()
        request = self.request
        compiled = compile_filters(request.filters)
        kbs = searchable_knowledge_bases(self.tenant, request.kb_ids)
        groups = _group_by_model(kbs)
        version_ids = tuple(version_id for group in groups for version_id in group.version_ids)

        variants = self._expand(version_ids)
        weights = self._weights(groups)
        lists = self._retrieve(groups, version_ids, variants, weights, compiled)

        t = time.perf_counter()
        content_hashes = self._content_hashes({chunk_id for rl in lists for chunk_id, _ in rl.hits})
        fused = reciprocal_rank_fusion(
            [RankedList(rl.retriever, rl.query, rl.weight, [h for h in rl.hits if h[0] in content_hashes]) for rl in lists],
            k=self.rrf_k,
            dedup_key=lambda chunk_id: content_hashes[chunk_id],
        )
        self.timer.add("fuse", t)

        head, rerank_scores = self._rerank(fused)
        results = self._hydrate(head[: request.top_k], rerank_scores, single_list=_single_list(lists))
        self.timer.timings["total"] = round((time.perf_counter() - started) * 1000, 3)
        return SearchResponse(
            results=results,
            mode=request.mode,
            queries=[{"text": v.text, "weight": v.weight, "origin": v.origin} for v in variants],
            weights=weights,
            reranked=rerank_scores is not None,
            degraded=self.degraded,
            notes=self.notes,
            candidates={**_candidate_counts(lists), "fused": len(fused)},
            timings_ms=self.timer.timings,
        )

    # --- stages -----------------------------------------------------------------------------------

    def _expand(self, version_ids: tuple[int, ...]) -> list[QueryVariant]:
        t = time.perf_counter()
        expansion = expand_query(self.request.query, tenant=self.tenant, version_ids=version_ids, options=self.request.expand)
        self.degraded.extend(expansion.degraded)
        self.timer.add("expand", t)
        return expansion.variants

    def _weights(self, groups: list[_Group]) -> dict[str, float]:
        mode = self.request.mode
        base = {**settings.SEARCH_WEIGHTS, **(self.request.weights or {})}
        weights = {retriever: (base.get(retriever, 1.0) if mode in (retriever, "hybrid") else 0.0) for retriever in RETRIEVERS}
        if mode == "hybrid" and weights["vector"] > 0 and groups:
            language = detect_language(self.request.query)
            uncovered = [g for g in groups if g.languages and language not in g.languages]
            if len(uncovered) == len(groups):
                weights["vector"] = min(weights["vector"], settings.DENSE_WEIGHT_FLOOR)
                models = ", ".join(sorted({g.model_name for g in uncovered}))
                action = "skipped" if weights["vector"] == 0 else f"weighted {weights['vector']}"
                self.notes.append(
                    f"dense retrieval {action}: the query is in '{language}', which the embedding model ({models}) does not cover"
                )
        return weights

    def _retrieve(self, groups, version_ids, variants, weights, compiled) -> list[RankedList]:
        mode = self.request.mode
        embedding = None
        if weights["vector"] > 0:
            # In the request's context, so the embedding thread's log lines carry its request id.
            context = contextvars.copy_context()
            embedding = _embedding_pool.submit(context.run, self._embed, groups, [v.text for v in variants])
        lists: list[RankedList] = []
        if weights["bm25"] > 0:
            try:
                lists += self._bm25(version_ids, variants, weights["bm25"], compiled)
            except LexicalIndexError as exc:
                if mode == "bm25":
                    raise LexicalIndexUnavailable(f"keyword search is unavailable: {exc.message}") from exc
                self._degrade("bm25", exc.cause, exc.message)
        if embedding is not None:
            # While the query is still embedding: size the vector scope, look up the BM25 hits' hashes.
            plans = self._plan_vector(groups, compiled)
            t = time.perf_counter()
            self._content_hashes({chunk_id for ranked in lists for chunk_id, _ in ranked.hits})
            self.timer.add("fuse", t)
            try:
                vectors = embedding.result()
            except EmbeddingError as exc:
                if mode == "vector" or not lists:
                    raise EmbedderUnavailable(f"cannot embed the query: {exc}") from exc
                self._degrade("vector", "embedder_unavailable", str(exc))
            else:
                lists += self._vector(groups, variants, vectors, weights["vector"], compiled, plans)
        return lists

    def _embed(self, groups: list[_Group], texts: list[str]) -> dict[str, np.ndarray]:
        t = time.perf_counter()
        vectors = {g.model_name: get_embedder(g.model_name).embed_documents(texts) for g in groups}
        self.timer.add("embed", t)
        return vectors

    def _scope(self, group: _Group) -> SearchScope:
        return SearchScope(self.tenant.pk, tuple(group.version_ids), group.dimension)

    def _plan_vector(self, groups: list[_Group], compiled) -> list[object | None]:
        t = time.perf_counter()
        index = vector_index()
        plans = [index.plan(self._scope(group), compiled.sql) for group in groups]
        self.timer.add("vector", t)
        return plans

    def _vector(self, groups, variants, vectors, weight, compiled, plans) -> list[RankedList]:
        t = time.perf_counter()
        index = vector_index()
        lists = []
        for i, variant in enumerate(variants):
            hits = []
            for group, plan in zip(groups, plans, strict=True):
                hits += index.search(self._scope(group), vectors[group.model_name][i], self.candidates, compiled.sql, plan)
            hits.sort(key=lambda hit: -hit.score)
            self._known_hashes.update((h.chunk_id, h.content_hash) for h in hits if h.content_hash is not None)
            lists.append(RankedList("vector", variant.text, weight * variant.weight, [(h.chunk_id, h.score) for h in hits[: self.candidates]]))
        self.timer.add("vector", t)
        return lists

    def _bm25(self, version_ids, variants, weight, compiled: CompiledFilter) -> list[RankedList]:
        t = time.perf_counter()
        index = get_lexical_index()
        analyzer = analyzer_for_tenant(self.tenant.pk)
        self._check_lexical_state(index, version_ids, analyzer)
        allowed, depth = self._allowed_chunk_ids(version_ids, compiled)
        lists = []
        for variant in variants:
            tokens = analyzer.tokens(variant.text)
            hits = []
            for version_id in version_ids:
                hits += index.search(version_id, self.tenant.pk, tokens, depth, allowed)
            hits.sort(key=lambda hit: -hit.score)
            if compiled.q and allowed is None:
                hits = self._post_filter(hits, compiled)
            lists.append(RankedList("bm25", variant.text, weight * variant.weight, [(h.chunk_id, h.score) for h in hits[: self.candidates]]))
        self.timer.add("bm25", t)
        return lists

    def _content_hashes(self, chunk_ids: set[int]) -> dict[int, str]:
        """Content hashes of these chunks, looked up once per search; a chunk missing from the result
        was deleted by a concurrent re-ingest after an index returned it."""
        if missing := chunk_ids - self._known_hashes.keys():
            self._known_hashes.update(Chunk.objects.filter(pk__in=missing).values_list("id", "content_hash"))
        return self._known_hashes

    def _allowed_chunk_ids(self, version_ids, compiled: CompiledFilter) -> tuple[list[int] | None, int]:
        """With filters, BM25 searches inside the chunk ids SQL says match (the source of truth for
        filters); when too many match, it over-fetches and filters its hits afterwards."""
        if not compiled.q:
            return None, self.candidates
        limit = settings.LEXICAL_FILTER_MAX_IDS
        scoped = compiled.apply(Chunk.objects.filter(tenant=self.tenant, kb_version_id__in=version_ids))
        ids = list(scoped.values_list("id", flat=True)[: limit + 1])
        if len(ids) <= limit:
            return ids, self.candidates
        return None, self.candidates * 10

    def _post_filter(self, hits, compiled: CompiledFilter):
        allowed = set(compiled.apply(Chunk.objects.filter(tenant=self.tenant, pk__in=[h.chunk_id for h in hits])).values_list("id", flat=True))
        return [hit for hit in hits if hit.chunk_id in allowed]

    def _check_lexical_state(self, index, version_ids, analyzer) -> None:
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
                self.notes.append(
                    f"the custom dictionary changed since KB version {version_id} was indexed; "
                    "run `manage.py rebuild_lexical_index` so protected terms match in full"
                )

    def _rerank(self, fused: list[FusedCandidate]) -> tuple[list[FusedCandidate], dict[int, float] | None]:
        if not self.request.rerank:
            return fused, None
        t = time.perf_counter()
        head = fused[: settings.RERANK_TOP_N]
        try:
            reranker = get_reranker()
            if reranker is None:
                self._degrade("rerank", "not_configured", "reranking was requested but no reranker is configured")
                return fused, None
            contents = dict(Chunk.objects.filter(pk__in=[c.chunk_id for c in head]).values_list("id", "content"))
            scores = reranker.rerank(self.request.query, [contents[c.chunk_id] for c in head])
        except RerankError as exc:
            self._degrade("rerank", exc.cause, exc.message)
            return fused, None
        finally:
            self.timer.add("rerank", t)
        by_chunk = {c.chunk_id: score for c, score in zip(head, scores, strict=True)}
        reordered = sorted(head, key=lambda c: -by_chunk[c.chunk_id]) + fused[len(head) :]
        return reordered, by_chunk

    def _hydrate(self, candidates: list[FusedCandidate], rerank_scores, *, single_list: bool) -> list[SearchHit]:
        chunks = Chunk.objects.filter(tenant=self.tenant, pk__in=[c.chunk_id for c in candidates]).select_related("document")
        by_id = {chunk.pk: chunk for chunk in chunks}
        source = self.request.mode
        results = []
        for candidate in candidates:
            chunk = by_id.get(candidate.chunk_id)
            if chunk is None:  # replaced by a concurrent re-ingest between two reads
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
                    source=source,
                    rank=len(results) + 1,
                    title=chunk.document.title,
                    source_uri=chunk.document.source_uri,
                    doc_type=chunk.doc_type,
                    metadata={**chunk.metadata, "tags": chunk.tags, "ordinal": chunk.ordinal},
                    fused_score=round(candidate.fused_score, 6),
                    rerank_score=None if rerank_score is None else round(float(rerank_score), 6),
                    retrievers={
                        name: {"rank": c.rank, "score": round(float(c.score), 6), "query": c.query}
                        for name, c in candidate.retrievers.items()
                    },
                    matched_queries=candidate.matched_queries,
                )
            )
        return results

    def _degrade(self, stage: str, cause: str, message: str) -> None:
        logger.warning("search degraded", extra={"stage": stage, "cause": cause, "detail": message})
        self.degraded.append({"stage": stage, "cause": cause, "message": message})


def _group_by_model(kbs: list[KnowledgeBase]) -> list[_Group]:
    groups: dict[tuple[str, int], _Group] = {}
    for kb in kbs:
        version = kb.active_version
        key = (version.embedding_model, version.embedding_dim)
        group = groups.setdefault(key, _Group(version.embedding_model, version.embedding_dim, tuple(kb.languages)))
        group.version_ids.append(version.pk)
    return list(groups.values())


def _single_list(lists: list[RankedList]) -> bool:
    """One retriever and one query: its raw score (cosine or BM25) is the most useful score to show."""
    return len(lists) == 1


def _candidate_counts(lists: list[RankedList]) -> dict[str, int]:
    chunk_ids: dict[str, set[int]] = {}
    for ranked in lists:
        chunk_ids.setdefault(ranked.retriever, set()).update(chunk_id for chunk_id, _ in ranked.hits)
    return {retriever: len(ids) for retriever, ids in chunk_ids.items()}
