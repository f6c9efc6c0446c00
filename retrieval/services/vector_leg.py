"""The dense leg: the query variants embedded in one call per model, the vector index's plan made while
they embed, and pgvector searched per embedding model, the variants beside each other
(``pools.per_variant``)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from cachetools import TTLCache

from engines.base import SearchScope, VectorHit, VectorIndex
from engines.embedders import get_embedder
from knowledge.stores import vector_index
from retrieval.fusion_functions import RankedList
from retrieval.keyword_filter import exact_field_filter
from retrieval.services.context import SearchContext
from retrieval.services.pools import per_variant
from retrieval.types import LegResult, ListQuery, ModelGroup
from tenants.models import Tenant

# Plans per tenant, versions at their revisions, dimension and filters: a version's rows change only
# with its revision. Only plans that found rows are kept (a stale one only steers exact scan vs HNSW,
# a stale "none" would hide new rows); the TTL follows the index's re-read of its size.
_vector_plans: TTLCache[Any, Any] = TTLCache(maxsize=10_000, ttl=60)
_vector_plans_lock = threading.Lock()


def embed(groups: tuple[ModelGroup, ...], texts: list[str], given: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The query variants' vectors under each group's model (runs on the embedding pool). With the
    caller's vector ``given`` (for one model: ``planning.caller_vector``), the original query's vector is
    that one and only the variants an expansion added are embedded."""
    if given is None:
        return {group.model_name: get_embedder(group.model_name).embed_queries(texts) for group in groups}
    vectors = {group.model_name: given[None, :] for group in groups}
    if len(texts) == 1:
        return vectors
    return {model: np.vstack([own, get_embedder(model).embed_queries(texts[1:])]) for model, own in vectors.items()}


def plan_vector(context: SearchContext) -> list[object | None]:
    """The vector index's plan per group: work that needs no query vector, done while it embeds, or
    remembered from an earlier search of the same scope."""
    index = vector_index()
    return [_vector_plan(index, context, group) for group in context.groups]


def _vector_plan(index: VectorIndex[Any], context: SearchContext, group: ModelGroup) -> object | None:
    filters = context.compiled.sql
    key = (context.tenant.pk, group.version_ids, group.revisions, group.dimension, filters.sql, repr(filters.params))
    with _vector_plans_lock:
        plan = _vector_plans.get(key)
    if plan is None:
        plan = index.plan(scope_of(context.tenant, group), filters)
        if plan:
            with _vector_plans_lock:
                _vector_plans[key] = plan
    return plan


def retrieve_vector(context: SearchContext, vectors: dict[str, np.ndarray], plans: list[object | None]) -> LegResult:
    """One dense list per query variant, over every model group; keeps the content hashes pgvector returns."""
    index = vector_index()
    weight, candidates, groups = context.weights["vector"], context.depths["vector"], context.groups
    # The filter as plain data too, when exact, for an index that cannot read SQL (Milvus refuses a
    # filter without it: docs/operations.md, "Where one machine ends").
    field_filter = exact_field_filter(context.compiled)

    def search_variant(i: int) -> list[VectorHit]:
        hits = []
        for group, plan in zip(groups, plans, strict=True):
            scope = scope_of(context.tenant, group)
            hits += index.search(
                scope, vectors[group.model_name][i], candidates, context.compiled.sql, plan, field_filter
            )
        hits.sort(key=lambda hit: -hit.score)
        return hits

    found = per_variant(search_variant, range(len(context.variants)), database=True)
    lists, queries, hashes = [], [], dict[int, str]()
    for i, (variant, hits) in enumerate(zip(context.variants, found, strict=True)):
        hashes.update((hit.chunk_id, hit.content_hash) for hit in hits if hit.content_hash is not None)
        ranked = [(hit.chunk_id, hit.score) for hit in hits[:candidates]]
        lists.append(RankedList("vector", variant.text, weight * variant.weight, ranked))
        queries.append(ListQuery(vectors={group.model_name: vectors[group.model_name][i] for group in groups}))
    return LegResult("vector", lists=lists, queries=queries, content_hashes=hashes)


def scope_of(tenant: Tenant, group: ModelGroup) -> SearchScope:
    return SearchScope(tenant.pk, group.version_ids, group.dimension)
