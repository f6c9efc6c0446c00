"""The retrieval legs of one search run side by side: the query embeds on the embedding pool and the
keyword index searches on the lexical pool while the request thread does the database work (BM25's
reads, the vector plan, the graph); whichever pool answers first is finished first."""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, replace
from typing import Any

from core.errors import DomainError
from retrieval import selectors
from retrieval.errors import EmbedderUnavailable, GraphUnavailable, LexicalIndexUnavailable, VectorIndexUnavailable
from retrieval.services.bm25_leg import confirm_bm25_hits, feed_back_bm25, prepare_bm25, search_keyword_index
from retrieval.services.context import SearchContext
from retrieval.services.degradation import degradation_of
from retrieval.services.graph_leg import retrieve_graph
from retrieval.services.pools import embedding_pool, in_pool, lexical_pool
from retrieval.services.vector_leg import embed, plan_vector, retrieve_vector
from retrieval.types import LegResult, LexicalHits, LexicalQuery

LEG_ORDER = ("bm25", "graph", "vector")


@dataclass(frozen=True)
class Retrieved:
    legs: list[LegResult]  # the legs that ran, in LEG_ORDER
    content_hashes: dict[int, str]  # chunk id -> content hash, for the hits whose hash is known already


def retrieve(context: SearchContext) -> Retrieved:
    """Every leg with a weight, each a list per query variant or its failure. Raises the last failed
    leg's error when no leg answers."""
    timings, weights = context.timings, context.weights
    embedding: Future[Any] | None = None
    lexical: Future[LexicalHits] | None = None
    embedding_stage = "embed"
    texts = [variant.text for variant in context.variants]
    if weights["vector"] > 0 and context.query_vector is not None and len(texts) == 1:
        embedding, embedding_stage = Future(), "vector"  # the caller's vector: nothing to embed
        embedding.set_result(embed(context.groups, texts, context.query_vector))
    elif weights["vector"] > 0:
        embedding = in_pool(embedding_pool, timings, "embed", embed, context.groups, texts, context.query_vector)
    legs: dict[str, LegResult] = {}
    query: LexicalQuery | None = None
    if weights["bm25"] > 0:
        with timings.stage("bm25"):
            try:
                query = prepare_bm25(context)
            except Exception as exc:
                legs["bm25"] = _failed_leg("bm25", exc, LexicalIndexUnavailable, "keyword search is unavailable")
        if query is not None:  # submitted outside the stage, so its span is the search's child like the others
            lexical = in_pool(lexical_pool, timings, "bm25", search_keyword_index, context, query)
    plans: list[object | None] = []
    plan_error: Exception | None = None
    if embedding is not None:
        with timings.stage("vector"):  # sizes the vector scope: needs no query vector
            try:
                plans = plan_vector(context)
            except Exception as exc:
                plan_error = exc
    known_hashes: dict[int, str] = {}
    if weights["graph"] > 0:
        with timings.stage("graph"):
            try:
                legs["graph"] = retrieve_graph(context)
            except Exception as exc:
                legs["graph"] = _failed_leg("graph", exc, GraphUnavailable, "graph search is unavailable")
        with timings.stage("fuse"):  # the graph hits' hashes the leg did not bring along
            graph = legs["graph"]
            hit_ids = {chunk_id for ranked in graph.lists for chunk_id, _ in ranked.hits}
            known_hashes = selectors.content_hashes(hit_ids - graph.content_hashes.keys())
    pending = {future: name for future, name in ((embedding, embedding_stage), (lexical, "bm25")) if future is not None}
    while pending:
        since = time.perf_counter()
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        future = next(iter(done))
        stage = pending.pop(future)
        timings.waited(stage, since)
        if stage == "bm25":
            assert query is not None  # the keyword search was sent with it
            legs["bm25"] = _finish_bm25(context, query, future)
        else:
            legs["vector"] = _finish_vector(context, plans, plan_error, future)
    ran = [legs[name] for name in LEG_ORDER if name in legs]
    if ran and all(leg.failure for leg in ran):
        assert ran[-1].unavailable is not None  # a failed leg's error
        raise ran[-1].unavailable
    for leg in ran:
        known_hashes.update(leg.content_hashes)
    return Retrieved(ran, known_hashes)


def _finish_bm25(context: SearchContext, query: LexicalQuery, searched: Future[LexicalHits]) -> LegResult:
    """The BM25 leg once the keyword index answered: its hits checked, or its failure; then its feedback
    pass when asked (whose failure leaves the first pass's lists, degraded)."""
    with context.timings.stage("bm25"):
        try:
            leg = confirm_bm25_hits(context, query, searched.result())
        except Exception as exc:
            return _failed_leg("bm25", exc, LexicalIndexUnavailable, "keyword search is unavailable")
    if not context.feedback.enabled:
        return leg
    with context.timings.stage("feedback"):
        try:
            return feed_back_bm25(context, leg, query)
        except Exception as exc:
            return replace(leg, degraded=[*leg.degraded, degradation_of("feedback", exc)])


def _finish_vector(
    context: SearchContext, plans: list[object | None], plan_error: Exception | None, embedding: Future[Any]
) -> LegResult:
    """The vector leg once the query embedded: pgvector searched, or the embedding's (or the plan's) failure."""
    try:
        vectors = embedding.result()
    except Exception as exc:
        return _failed_leg("vector", exc, EmbedderUnavailable, "cannot embed the query")
    if plan_error is not None:
        return _failed_leg("vector", plan_error, VectorIndexUnavailable, "vector search is unavailable")
    with context.timings.stage("vector"):
        try:
            return retrieve_vector(context, vectors, plans)
        except Exception as exc:
            return _failed_leg("vector", exc, VectorIndexUnavailable, "vector search is unavailable")


def _failed_leg(retriever: str, exc: Exception, unavailable: type[DomainError], summary: str) -> LegResult:
    """A leg that raised: a degradation, or the ``unavailable`` error when no other leg answers."""
    failure = degradation_of(retriever, exc)
    return LegResult(retriever, failure=failure, unavailable=unavailable(f"{summary}: {failure.message}"))
