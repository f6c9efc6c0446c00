"""The BM25 leg: the database reads before the keyword index searches, the index's search, the
check of its hits against the chunk table, and the RM3 feedback pass; each of the last three searches
the query variants beside each other (``pools.per_variant``)."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any

from cachetools import TTLCache
from django.conf import settings

from engines.analysis import Analyzer
from engines.base import LexicalHit, LexicalIndex, LexicalIndexError
from engines.lexical_filter import LexicalFilter
from knowledge.stores import lexical_index
from retrieval import selectors
from retrieval.expansion.base import QueryVariant
from retrieval.expansion.rm3 import feedback_query
from retrieval.fusion_functions import RankedList
from retrieval.keyword_filter import keyword_filter
from retrieval.services.context import SearchContext
from retrieval.services.pools import per_variant
from retrieval.types import LegResult, LexicalHits, LexicalQuery, ListQuery

logger = logging.getLogger("retrieval.services.search")  # the pipeline's logger, as log filters know it

# How deep, in times the leg's candidates, a filtered search without the filter's chunk ids may go
# to find enough hits that pass (docs/BENCHMARKS.md, "Scale to 1M chunks").
FILTERED_DEPTH_LIMIT = 1000

# Whether a version's keyword index carries the business fields (it gains them with a rebuild, never
# loses them): read at most once a minute per version, since Elasticsearch answers with two requests.
_filters_in_index: TTLCache[Any, Any] = TTLCache(maxsize=10_000, ttl=60)
_filters_in_index_lock = threading.Lock()


def prepare_bm25(context: SearchContext) -> LexicalQuery:
    """With filters, the index filters itself when its entries carry the business fields (the filter
    translated, exactly or wider: ``retrieval.keyword_filter``). Otherwise the chunk ids SQL says match
    (the source of truth for filters) for the index to search inside; when too many match, the index
    searches without them, ten times deeper. Hits found without ids are checked against SQL after."""
    candidates = context.depths["bm25"]
    allowed, depth = None, candidates
    if context.compiled.q:
        level = _index_filters(context.version_ids) if settings.LEXICAL_FILTER_IN_INDEX else 0
        field_filter = keyword_filter(context.compiled, acl_terms=level >= 2) if level else None
        if field_filter is not None:
            return LexicalQuery(context.analyzer, None, candidates, field_filter)
        allowed = selectors.filtered_chunk_ids(
            context.tenant, context.version_ids, context.compiled, settings.LEXICAL_FILTER_MAX_IDS
        )
        depth = candidates if allowed is not None else candidates * 10
    return LexicalQuery(context.analyzer, allowed, depth)


def _index_filters(version_ids: tuple[int, ...]) -> int:
    """What the keyword index of every version carries: 0, no filter fields; 1, the business fields; 2,
    their ACL terms too (``engines.lexical_filter.FILTER_FIELDS_LEVEL``)."""
    index = lexical_index()
    lowest = 2
    for version_id in version_ids:
        with _filters_in_index_lock:
            known = _filters_in_index.get(version_id)
        if known is None:
            state = index.state(version_id)
            known = 0 if state is None or not state.filters else 2 if state.acl else 1
            with _filters_in_index_lock:
                _filters_in_index[version_id] = known
        lowest = min(lowest, known)
    return lowest


def search_keyword_index(context: SearchContext, query: LexicalQuery) -> LexicalHits:
    """The keyword index's hits and BM25 ceilings per query variant. No database: it runs on the
    lexical pool, beside the embedding and the request thread's database work."""
    index = lexical_index()
    notes = _lexical_index_notes(index, context.version_ids, query.analyzer)
    version_ids = context.version_ids

    def search_variant(variant: QueryVariant) -> tuple[list[LexicalHit], list[str], dict[tuple[str, int], float]]:
        tokens = query.analyzer.tokens(variant.text)
        hits = bm25_hits(
            index, context.tenant.pk, version_ids, tokens, query.depth, query.allowed, None, query.field_filter
        )
        return (
            hits,
            tokens,
            {(variant.text, version_id): index.max_score(version_id, tokens) for version_id in version_ids},
        )

    searched = per_variant(search_variant, context.variants, database=False)
    ceilings = {key: score for _, _, variant_ceilings in searched for key, score in variant_ceilings.items()}
    return LexicalHits([hits for hits, _, _ in searched], [tokens for _, tokens, _ in searched], ceilings, notes)


def confirm_bm25_hits(context: SearchContext, query: LexicalQuery, found: LexicalHits) -> LegResult:
    """One BM25 list per query variant, of the index's hits the chunk table confirms (they exist and
    pass the filters; searched inside the allowed ids, they need no check)."""
    index = lexical_index()
    weight = context.weights["bm25"]

    def check_variant(searched: tuple[QueryVariant, list[LexicalHit], list[str]]) -> tuple[RankedList, dict[int, str]]:
        variant, hits, tokens = searched
        hashes: dict[int, str] = {}
        if query.allowed is None:
            hits = _hits_of_existing_chunks(index, context, query, tokens, hits, hashes)
        ranked = [(hit.chunk_id, hit.score) for hit in hits[: context.depths["bm25"]]]
        return RankedList("bm25", variant.text, weight * variant.weight, ranked), hashes

    searched = list(zip(context.variants, found.hits, found.tokens, strict=True))
    if query.allowed is None:  # each variant's hits checked by a query of its own
        checked = per_variant(check_variant, searched, database=True)
    else:  # searched inside the allowed ids: nothing to read
        checked = [check_variant(variant) for variant in searched]
    return LegResult(
        "bm25", lists=[ranked for ranked, _ in checked], queries=[ListQuery(tokens=tokens) for tokens in found.tokens],
        content_hashes={chunk_id: h for _, hashes in checked for chunk_id, h in hashes.items()},
        ceilings=found.ceilings, notes=found.notes,
    )  # fmt: skip


def feed_back_bm25(context: SearchContext, leg: LegResult, query: LexicalQuery) -> LegResult:
    """The leg searched again with each variant's RM3 query (``retrieval.expansion.rm3``), built from
    its first list's top passages as indexed. The lists keep their variant's text; its BM25 ceiling
    becomes the weighted query's, so ``relevance`` stays a share of the most the query could score."""
    index = lexical_index()
    feedback, version_ids = context.feedback, context.version_ids
    top = {chunk_id for ranked in leg.lists for chunk_id, _ in ranked.hits[: feedback.docs]}
    texts = selectors.indexed_texts(context.tenant, list(top))

    def feed_back(
        first_pass: tuple[RankedList, ListQuery],
    ) -> tuple[RankedList, ListQuery, dict[int, str], dict[tuple[str, int], float]]:
        ranked, first = first_pass
        passages = [
            (query.analyzer.tokens(texts[chunk_id]), score)
            for chunk_id, score in ranked.hits[: feedback.docs]
            if chunk_id in texts
        ]
        assert first.tokens is not None  # a BM25 list's query
        weighted = feedback_query(first.tokens, passages, feedback)
        hits = bm25_hits(
            index, context.tenant.pk, version_ids, weighted.tokens, query.depth, query.allowed, weighted.weights,
            query.field_filter,
        )  # fmt: skip
        hashes: dict[int, str] = {}
        if query.allowed is None:
            hits = _hits_of_existing_chunks(index, context, query, weighted.tokens, hits, hashes, weighted.weights)
        ceilings = {
            (ranked.query, version_id): index.max_score(version_id, weighted.tokens, weighted.weights)
            for version_id in version_ids
        }
        return (
            replace(ranked, hits=[(hit.chunk_id, hit.score) for hit in hits[: context.depths["bm25"]]]),
            ListQuery(tokens=weighted.tokens, token_weights=weighted.weights), hashes, ceilings,
        )  # fmt: skip

    passes = per_variant(feed_back, list(zip(leg.lists, leg.queries, strict=True)), database=query.allowed is None)
    ceilings, hashes = dict(leg.ceilings), dict(leg.content_hashes)
    for _, _, variant_hashes, variant_ceilings in passes:
        hashes.update(variant_hashes)
        ceilings.update(variant_ceilings)
    lists, queries = [ranked for ranked, *_ in passes], [weighted for _, weighted, *_ in passes]
    return replace(leg, lists=lists, queries=queries, content_hashes=hashes, ceilings=ceilings)


def bm25_hits(
    index: LexicalIndex,
    tenant_id: int,
    version_ids: tuple[int, ...],
    tokens: list[str],
    depth: int,
    allowed: list[int] | None,
    weights: list[float] | None = None,
    field_filter: LexicalFilter | None = None,
) -> list[LexicalHit]:
    """The index's hits over every searched version, best first."""
    hits = []
    for version_id in version_ids:
        hits += index.search(version_id, tenant_id, tokens, depth, allowed, weights, field_filter)
    hits.sort(key=lambda hit: -hit.score)
    return hits


def _hits_of_existing_chunks(
    index: LexicalIndex,
    context: SearchContext,
    query: LexicalQuery,
    tokens: list[str],
    hits: list[LexicalHit],
    hashes: dict[int, str],
    weights: list[float] | None = None,
) -> list[LexicalHit]:
    """Of the index's ``hits``, those whose chunk exists and passes the filters; their content hashes
    are added to ``hashes``. An entry whose chunk is gone (a change not yet applied to the index) is
    dropped and the search goes deeper by as many, so it never takes a real chunk's place. With
    filters it goes ten times deeper until enough pass, the index runs out, or
    :data:`FILTERED_DEPTH_LIMIT` is reached: the hits a search inside the filter's ids would give."""
    tenant, compiled, candidates, depth = context.tenant, context.compiled, context.depths["bm25"], query.depth
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
        hits = bm25_hits(index, tenant.pk, context.version_ids, tokens, depth, None, weights, query.field_filter)
    hashes.update(passing)
    if not compiled.q and len(kept) < len(hits):
        logger.warning(
            "the keyword index of KB versions %s holds %d entries for chunks not in the database; "
            "`manage.py check_kb --repair` removes them if they stay",
            list(context.version_ids), len(hits) - len(kept),
        )  # fmt: skip
    return kept


def _lexical_index_notes(index: LexicalIndex, version_ids: tuple[int, ...], analyzer: Analyzer) -> list[str]:
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
