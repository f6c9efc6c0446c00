"""``leg_candidates: "union"``: BM25 and dense each also rank the other's first hits, scored as they
would have scored them, so fusion by rank does not treat "not in this leg's list" as "ranked last"."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engines.base import LexicalIndex
from knowledge.stores import lexical_index, vector_index
from retrieval.fusion_functions import RankedList
from retrieval.relevance import CALIBRATED
from retrieval.services.bm25_leg import bm25_hits
from retrieval.services.context import SearchContext
from retrieval.services.degradation import degradation_of
from retrieval.services.pools import in_pool, lexical_pool, per_variant
from retrieval.services.vector_leg import scope_of
from retrieval.types import LegResult, ListQuery

# The head of each leg's list that the other leg scores
# (docs/BENCHMARKS.md, "The candidate union scored by both legs").
UNION_HEAD = 10


@dataclass(frozen=True)
class UnionScored:
    legs: list[LegResult]
    degraded: list[dict[str, Any]]


def score_union(context: SearchContext, legs: list[LegResult], leg_candidates: str) -> UnionScored:
    """Every BM25 and dense list extended by the other leg's first ``UNION_HEAD`` passages it did not
    find: the dense cosine of BM25's (read by id), the BM25 score of dense's (the keyword index
    searched inside their ids: no match, no entry). No second search; the graph's list stays as
    found. On any failure the lists as found, degraded."""
    scorable = [leg for leg in legs if leg.retriever in CALIBRATED and leg.lists and not leg.failure]
    if leg_candidates != "union" or len(scorable) < 2:  # one leg: its lists are the union
        return UnionScored(legs, [])
    union = {chunk_id for leg in scorable for ranked in leg.lists for chunk_id, _ in ranked.hits[:UNION_HEAD]}
    bm25, vector = sorted(scorable, key=lambda leg: leg.retriever)
    # The keyword index (no database) on the lexical pool while this thread reads the dense scores.
    lexical = in_pool(lexical_pool, context.timings, "union", _leg_over, context, bm25, union)
    with context.timings.stage("union"):
        try:
            dense = _leg_over(context, vector, union)
            scored = {"bm25": lexical.result(), "vector": dense}
        except Exception as exc:
            return UnionScored(legs, [degradation_of("union", exc).as_dict()])
    return UnionScored([scored.get(leg.retriever, leg) for leg in legs], [])


def _leg_over(context: SearchContext, leg: LegResult, union: set[int]) -> LegResult:
    """The leg with each list extended to the ``union``'s passages it scores, best first; the lists of
    the query variants beside each other (``pools.per_variant``)."""
    dense = leg.retriever == "vector"
    index = vector_index() if dense else lexical_index()

    def extend(list_and_query: tuple[RankedList, ListQuery]) -> RankedList:
        ranked, query = list_and_query
        missing = sorted(union - {chunk_id for chunk_id, _ in ranked.hits})
        if dense:
            assert not isinstance(index, LexicalIndex) and query.vectors is not None  # the vector leg's
            scored = [
                (hit.chunk_id, hit.score)
                for group in context.groups
                for hit in index.similarities(scope_of(context.tenant, group), query.vectors[group.model_name], missing)
            ]
        else:
            assert isinstance(index, LexicalIndex) and query.tokens is not None  # the BM25 leg's
            hits = bm25_hits(
                index, context.tenant.pk, context.version_ids, query.tokens, len(missing), missing, query.token_weights
            )
            scored = [(hit.chunk_id, hit.score) for hit in hits]
        return replace(ranked, hits=sorted([*ranked.hits, *scored], key=lambda hit: -hit[1]))

    lists = per_variant(extend, list(zip(leg.lists, leg.queries, strict=True)), database=dense)
    return replace(leg, lists=lists)
