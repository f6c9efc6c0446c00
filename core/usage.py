"""Per-tenant query counters in Redis, shared by every worker and machine.

They count from when that Redis started (the embedded one keeps nothing on disk). With Redis down a
search is served uncounted and :func:`query_counts` answers None.
"""
from __future__ import annotations

from django.core.cache import cache
from django_redis import get_redis_connection

from core.redis import REDIS_ERRORS, warn_redis_unavailable

def _key(tenant_id: int, counter: str) -> str:
    return f"stats:{counter}:{tenant_id}"


def count_query(tenant_id: int, *, cached: bool) -> None:
    """One search served to the tenant (``cached``: answered from the response cache)."""
    counters = ("queries", "cache_hits") if cached else ("queries",)
    try:
        # One round trip; INCR starts a missing counter at 0, and django-redis stores integers as
        # plain Redis integers, so cache.get_many reads them back.
        pipeline = get_redis_connection("default").pipeline(transaction=False)
        for counter in counters:
            pipeline.incr(cache.make_key(_key(tenant_id, counter)))
        pipeline.execute()
    except REDIS_ERRORS as exc:  # an outage must not turn a served search into an error
        warn_redis_unavailable("query counters", exc)


def query_counts(tenant_id: int) -> dict | None:
    keys = {counter: _key(tenant_id, counter) for counter in ("queries", "cache_hits")}
    try:
        values = cache.get_many(list(keys.values()))
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("query counters", exc)
        return None
    queries, hits = (values.get(keys[counter], 0) for counter in ("queries", "cache_hits"))
    return {"served": queries, "cache_hits": hits, "cache_hit_ratio": round(hits / queries, 4) if queries else None}
