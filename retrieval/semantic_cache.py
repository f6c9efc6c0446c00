"""The semantic cache: a query close enough to one answered before, in the same scope, reuses its answer.

Behind the exact result cache (``retrieval.cache``), for the KBs whose search settings turn it on
(``semantic_cache: true``; off by default). A lookup applies only where the search has a dense leg that
would embed the query anyway (mode ``vector`` or ``hybrid`` with a dense weight, one embedding model, a
query language the model covers): never to BM25 or graph searches, where identifiers must match exactly.
Its embedding is the dense leg's (``vector_leg.embed``), handed on to the search on a miss, so the query
embeds once.

An entry is a row of ``SemanticCacheEntry``: the query's vector, the digest of every part of the search
cache key but the query (``scope``: tenant, KB versions and revisions, vocabulary stamp, options, fusion
and ranking settings), the digest of its exact tokens (``retrieval.query_signature``: numbers, codes,
dates, protected terms) and the key under which the result cache keeps the answer. A hit needs the same
tenant, scope and signature and a cosine of at least ``SEMANTIC_CACHE_MIN_COSINE``; pgvector ranks the
scope's rows exactly (``<=>`` after the btree filter: a scope holds a few hundred rows at most). A
content or vocabulary change makes a new scope, so old rows are never found again; they expire with their
answer (``SEARCH_CACHE_TTL_S``) and the hourly beat task deletes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from pgvector.django import CosineDistance

from core.metrics import record_semantic_cache
from core.redis import REDIS_ERRORS, warn_redis_unavailable
from engines.analysis import detect_language
from knowledge.selectors.search import SearchedKnowledge, tenant_vocabulary
from retrieval.models import SemanticCacheEntry
from retrieval.query_signature import signature
from retrieval.services.planning import caller_vector, model_groups, retriever_weights, searched_settings
from retrieval.services.timings import StageTimings
from retrieval.services.vector_leg import embed
from retrieval.types import SearchRequest
from tenants.models import Tenant

KIND = "semantic"  # what a hit's ``cached`` says


@dataclass(frozen=True)
class Lookup:
    """A request the semantic cache may answer: where to look, and its query's vector (the search's)."""

    scope: str
    signature: str
    vector: np.ndarray  # unit length, under the searched versions' one model


@dataclass(frozen=True)
class SemanticHit:
    """The cached query whose answer is reused, its result cache key and its cosine to the new query."""

    query: str
    key: str
    cosine: float

    def as_dict(self) -> dict[str, Any]:
        """The response's ``cache`` object."""
        return {"kind": KIND, "query": self.query, "cosine": round(self.cosine, 4)}


def is_enabled(knowledge: SearchedKnowledge) -> bool:
    """Every searched KB turns it on (its search settings, the version's over the KB's)."""
    return bool(knowledge.versions) and all(v.search_settings.get("semantic_cache") for v in knowledge.versions)


def prepare(
    tenant: Tenant, request: SearchRequest, knowledge: SearchedKnowledge, scope: str, timings: StageTimings
) -> Lookup | None:
    """The lookup of ``request`` in ``scope``, its query embedded (timed as ``embed``), or None where the
    semantic cache does not apply (see the module's docstring)."""
    if request.mode not in ("vector", "hybrid") or not is_enabled(knowledge):
        return None
    groups = model_groups(knowledge.versions)
    if len(groups) != 1:
        return None
    (group,) = groups
    if group.languages and detect_language(request.query) not in group.languages:
        return None
    if retriever_weights(request, groups, searched_settings(request, knowledge)).by_retriever["vector"] <= 0:
        return None
    analyzer = tenant_vocabulary(tenant.pk, knowledge.vocabulary_stamp).analyzer
    with timings.stage("embed"):
        vector = embed(tuple(groups), [request.query], caller_vector(request, groups))[group.model_name][0]
    return Lookup(scope, signature(request.query, analyzer), vector)


def find(
    tenant: Tenant, lookup: Lookup, timings: StageTimings
) -> tuple[SemanticHit, tuple[dict[str, Any], bytes]] | None:
    """The nearest cached query of the scope with the same signature, if close enough and its answer is
    still in the result cache, with that answer; counts a hit or a miss."""
    with timings.stage("semantic_cache"):
        found = _nearest(tenant, lookup)
        stored = None
        if found is not None:
            try:
                stored = cache.get(found.key)
            except REDIS_ERRORS as exc:
                warn_redis_unavailable("search cache", exc)
    record_semantic_cache(stored is not None)
    return None if found is None or stored is None else (found, stored)


def entry(tenant: Tenant, lookup: Lookup, query: str, key: str) -> SemanticCacheEntry:
    """The row that keeps ``query``'s vector for the answer stored under ``key`` (unsaved: the result
    cache's writer saves it with that answer, after the answer is in Redis)."""
    return SemanticCacheEntry(
        tenant=tenant, scope=lookup.scope, signature=lookup.signature, query=query, key=key,
        embedding=lookup.vector, expires_at=timezone.now() + timedelta(seconds=settings.SEARCH_CACHE_TTL_S),
    )  # fmt: skip


def remember(entries: list[SemanticCacheEntry]) -> None:
    """Save ``entries`` in one statement; a row of the same tenant and key, left by an identical query, is
    renewed (within the batch, the last one of a key wins: one statement may not update a row twice)."""
    latest = {(row.tenant_id, row.key): row for row in entries}
    SemanticCacheEntry.objects.bulk_create(
        list(latest.values()),
        update_conflicts=True,
        unique_fields=["tenant", "key"],
        update_fields=["scope", "signature", "query", "embedding", "expires_at"],
    )


def purge_expired() -> int:
    """Delete the rows whose answers expired (the hourly beat task); returns how many."""
    deleted, _ = SemanticCacheEntry.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted


def _nearest(tenant: Tenant, lookup: Lookup) -> SemanticHit | None:
    distance = CosineDistance("embedding", lookup.vector)
    row = (
        SemanticCacheEntry.objects.filter(
            tenant=tenant, scope=lookup.scope, signature=lookup.signature, expires_at__gt=timezone.now()
        )
        .annotate(distance=distance)
        .order_by("distance")
        .values_list("query", "key", "distance")
        .first()
    )
    if row is None or 1 - row[2] < settings.SEMANTIC_CACHE_MIN_COSINE:
        return None
    return SemanticHit(query=row[0], key=row[1], cosine=1 - row[2])
