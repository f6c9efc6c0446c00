"""Redis: the result cache, rate-limit counters, idempotency records and usage counters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from retrieval_site.settings.base import RedisUrlOrUnset, Section


class Cache(Section):
    title = "Cache, rate limits and idempotency (Redis)"

    REDIS_URL: RedisUrlOrUnset = ""  # unset: the embedded server
    EMBEDDED_REDIS_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "redis")
    REDIS_TIMEOUT_S: PositiveFloat = 0.5  # short: a Redis outage degrades, never stalls
    # Circuit breaker: after this many timeouts or connection errors within the window, Redis is skipped
    # (cache, rate limits per RATE_LIMIT_FAIL_OPEN, idempotency, counters) for the cool-down.
    REDIS_BREAKER_FAILURES: PositiveInt = 5
    REDIS_BREAKER_WINDOW_S: PositiveFloat = 10.0
    REDIS_BREAKER_COOLDOWN_S: PositiveFloat = 5.0
    SEARCH_CACHE_TTL_S: NonNegativeInt = 3600  # 0 disables the result cache
    SEARCH_CACHE_WAIT_S: NonNegativeFloat = 2.0  # identical misses wait this long for the first
    # The semantic cache (per KB, off by default): a query this close to a cached one of the same scope and
    # exact tokens reuses its answer (docs/benchmarks/decisions.md, "The semantic cache's threshold").
    SEMANTIC_CACHE_MIN_COSINE: Annotated[float, Field(gt=0, le=1)] = 0.88
    # A computed answer is stored off the request thread (core.background): a queue of at most
    # SEARCH_CACHE_WRITE_QUEUE_SIZE entries (0: the request thread stores it, before answering) waits for the
    # writer, which stores up to SEARCH_CACHE_WRITE_BATCH_SIZE in one round trip, those that come within
    # SEARCH_CACHE_WRITE_FLUSH_S of the first. A full queue drops the entry (retrieval_search_cache_writes_dropped).
    SEARCH_CACHE_WRITE_QUEUE_SIZE: NonNegativeInt = 1000
    SEARCH_CACHE_WRITE_BATCH_SIZE: PositiveInt = 100
    SEARCH_CACHE_WRITE_FLUSH_S: NonNegativeFloat = 0.005
    # Each process remembers usable API keys this long: a revocation elsewhere takes up to this to apply.
    API_KEY_CACHE_TTL_S: NonNegativeInt = 5
    # Each process sends its searches' usage counters (the dashboard's) to Redis this often, summed.
    USAGE_COUNTERS_FLUSH_S: NonNegativeFloat = 1.0  # 0: one round trip per search, after its answer
    # Tiers live in the database (admin: Rate tiers); counters are fixed windows of this length.
    RATE_LIMIT_WINDOW_S: PositiveInt = 60
    RATE_LIMIT_FAIL_OPEN: bool = True  # Redis down: serve (true) or 503 (false)
    RATE_LIMIT_ANONYMOUS: NonNegativeInt = 100  # per client IP and window, no key or a bad one
    IDEMPOTENCY_TTL_S: PositiveInt = 24 * 3600  # how long a stored response is replayed
    IDEMPOTENCY_LOCK_TTL_S: PositiveInt = 120  # in-flight marker; outlives any request
