"""Per-tenant query counters in Redis, shared by every worker and machine, and what the console's
tenant dashboard shows: queries per day and mode, cache hits, latencies, degradations by stage, the
top queries and those with no result, the current rate-limit window's searches per mode, and the
units each day's requests and ingestions consumed (``core.cost``).

Every structure is bounded: daily hashes expire after ``DAYS_KEPT`` (cost days after ``COST_DAYS_KEPT``), window hashes after two
windows, latencies keep the latest ``LATENCIES_KEPT`` (and each day a histogram of its searches' latencies, buckets
``LATENCY_BUCKET_GROWTH`` apart, for the day's percentiles), each query ranking its ``QUERIES_KEPT`` most
frequent (the rarest drop out). They count from when that Redis started (the embedded one keeps
nothing on disk). With Redis down a search is served uncounted and the readers answer None.

A process adds up its searches (and its requests' and tasks' units) and sends them every ``USAGE_COUNTERS_FLUSH_S`` in one round trip
(the same commands, by their sums), so a cached answer's request thread sends nothing. The readers send
their own process's sums first; another worker's show within that time. A worker stopping sends its
sums at exit; one killed loses at most that time's counts.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django_redis import get_redis_connection

from core.redis import REDIS_ERRORS, warn_redis_unavailable

DAYS_KEPT = 30
COST_DAYS_KEPT = 400  # a year of daily cost rows per tenant, and a month to bill the last one
LATENCIES_KEPT = 1000
QUERIES_KEPT = 500
QUERY_CHARS_KEPT = 200
# A day's latency histogram: bucket i holds (GROWTH**(i-1), GROWTH**i] ms, so a day's percentile read from it
# (its bucket's upper bound) is at most 5 % above the exact one, in at most ~190 buckets from 1 ms to 10 s.
LATENCY_BUCKET_GROWTH = 1.05
LATENCY_FLOOR_MS = 0.01  # shorter ones count in this one's bucket


@dataclass(frozen=True)
class ServedQuery:
    """One search served to a tenant, as its response tells it."""

    mode: str
    cached: bool  # answered from the response cache
    latency_ms: float
    query: str
    hits: int
    degraded_stages: tuple[str, ...] = ()


def _key(tenant_id: int, counter: str) -> str:
    return f"stats:{counter}:{tenant_id}"


@dataclass
class _Sums:
    """Counter commands added up: (command, key, member) -> amount, then what follows them."""

    increments: collections.Counter[tuple[str, str, str | None]] = field(default_factory=collections.Counter)
    expiries: dict[str, int] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    rankings: set[str] = field(default_factory=set)
    events: int = 0  # searches and charges added up


_pending = _Sums()
_pending_lock = threading.Lock()
_flush_timer: threading.Timer | None = None
_MAX_PENDING = 10_000  # events: a flush that cannot keep up is sent by the event that reaches it


def count_query(tenant_id: int, served: ServedQuery, *, now: float | None = None) -> None:
    """Record one search served to the tenant: added to this process's sums (see the module's doc)."""
    now = time.time() if now is None else now

    def key(name: str) -> str:  # the prefix of now, not of the flush (tests switch it)
        return cache.make_key(_key(tenant_id, name))

    daily, window = key(f"daily:{_day(now)}"), key(f"window:{int(now // settings.RATE_LIMIT_WINDOW_S)}")
    latency, daily_latency = key("latency"), key(f"daily_latency:{_day(now)}")
    query = " ".join(served.query.split()).casefold()[:QUERY_CHARS_KEPT]
    # INCR starts a missing counter at 0, and django-redis stores integers as plain Redis integers,
    # so cache.get_many reads them back.
    commands = [("incrby", key("queries"), None), ("hincrby", daily, served.mode), ("hincrby", window, served.mode)]
    commands.append(("hincrby", daily_latency, str(latency_bucket(served.latency_ms))))
    if served.cached:
        commands += [("incrby", key("cache_hits"), None), ("hincrby", daily, "cache_hits")]
    commands += [("hincrby", key("degraded"), stage) for stage in served.degraded_stages]
    rankings = [key(ranking) for ranking in (("top", "no_result") if served.hits == 0 else ("top",))]
    commands += [("zincrby", ranking, query) for ranking in rankings]
    with _pending_lock:
        _pending.increments.update(commands)
        _pending.expiries[daily] = _pending.expiries[daily_latency] = DAYS_KEPT * 86400
        _pending.expiries[window] = 2 * settings.RATE_LIMIT_WINDOW_S
        _pending.latencies.setdefault(latency, []).append(round(served.latency_ms, 3))
        _pending.rankings.update(rankings)
        flush_now = _added_event()
    if flush_now:
        flush_counts()


def count_cost(tenant_id: int, units: dict[str, float], *, now: float | None = None) -> None:
    """Add a request's or a task's units (``engines.metering.KINDS``) to the tenant's day, like a search."""
    now = time.time() if now is None else now
    daily = cache.make_key(_key(tenant_id, f"cost:{_day(now)}"))
    commands = {("hincrbyfloat", daily, kind): amount for kind, amount in units.items() if amount}
    if not commands:
        return
    with _pending_lock:
        _pending.increments.update(commands)
        _pending.expiries[daily] = COST_DAYS_KEPT * 86400
        flush_now = _added_event()
    if flush_now:
        flush_counts()


def _added_event() -> bool:
    """Count one event into the pending sums (under ``_pending_lock``): True when it should flush now, else
    a flush is scheduled."""
    global _flush_timer
    _pending.events += 1
    flush_now = settings.USAGE_COUNTERS_FLUSH_S <= 0 or _pending.events >= _MAX_PENDING
    if not flush_now and _flush_timer is None:
        _flush_timer = threading.Timer(settings.USAGE_COUNTERS_FLUSH_S, flush_counts)
        _flush_timer.daemon = True
        _flush_timer.start()
    return flush_now


def flush_counts() -> None:
    """Send this process's sums to Redis, in one round trip (lost, with a warning, if Redis is down)."""
    global _pending, _flush_timer
    with _pending_lock:
        sums, _pending = _pending, _Sums()
        if _flush_timer is not None:
            _flush_timer.cancel()  # a no-op when it is the timer that flushes
        _flush_timer = None
    if not sums.events:
        return
    try:
        pipeline = get_redis_connection("default").pipeline(transaction=False)
        for (command, key, member), amount in sums.increments.items():
            if command == "incrby":
                pipeline.incrby(key, amount)
            elif command == "hincrby":
                pipeline.hincrby(key, member, amount)
            elif command == "hincrbyfloat":
                pipeline.hincrbyfloat(key, member, amount)
            else:
                pipeline.zincrby(key, amount, member)
        for key, seconds in sums.expiries.items():
            pipeline.expire(key, seconds)
        for key, latencies in sums.latencies.items():
            pipeline.lpush(key, *latencies)
            pipeline.ltrim(key, 0, LATENCIES_KEPT - 1)
        for key in sums.rankings:
            pipeline.zremrangebyrank(key, 0, -QUERIES_KEPT - 1)
        pipeline.execute()
    except REDIS_ERRORS as exc:  # an outage must not turn a served search into an error
        warn_redis_unavailable("query counters", exc)


atexit.register(flush_counts)


def query_counts(tenant_id: int) -> dict[str, Any] | None:
    flush_counts()
    keys = {counter: _key(tenant_id, counter) for counter in ("queries", "cache_hits")}
    try:
        values = cache.get_many(list(keys.values()))
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("query counters", exc)
        return None
    queries, hits = (values.get(keys[counter], 0) for counter in ("queries", "cache_hits"))
    return {"served": queries, "cache_hits": hits, "cache_hit_ratio": _ratio(hits, queries)}


def query_usage(tenant_id: int, *, days: int = 14, top: int = 10, now: float | None = None) -> dict[str, Any] | None:
    """The dashboard's numbers: ``daily`` (oldest first: date, per-mode counts, cache hit ratio, and
    ``latency_ms``: the day's p50/p95 from its histogram, None on a day without searches),
    ``latency_ms`` (p50/p95 over the latest searches), ``degraded`` (stage -> count), ``top_queries``
    and ``no_result_queries`` ((query, count), most frequent first), ``window`` (mode -> searches in
    the current rate-limit window)."""
    flush_counts()
    now = time.time() if now is None else now
    dates = [_day(now - 86400 * back) for back in range(days - 1, -1, -1)]

    def key(name: str) -> str:
        return cache.make_key(_key(tenant_id, name))

    try:
        pipeline = get_redis_connection("default").pipeline(transaction=False)
        for date in dates:
            pipeline.hgetall(key(f"daily:{date}"))
            pipeline.hgetall(key(f"daily_latency:{date}"))
        pipeline.lrange(key("latency"), 0, -1)
        pipeline.hgetall(key("degraded"))
        pipeline.zrevrange(key("top"), 0, top - 1, withscores=True)
        pipeline.zrevrange(key("no_result"), 0, top - 1, withscores=True)
        pipeline.hgetall(key(f"window:{int(now // settings.RATE_LIMIT_WINDOW_S)}"))
        *days_read, latencies, degraded, top_queries, no_result, window = pipeline.execute()
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("query counters", exc)
        return None
    return {
        "daily": [
            _daily_row(date, _ints(counts), _ints(buckets))
            for date, counts, buckets in zip(dates, days_read[::2], days_read[1::2], strict=True)
        ],
        "latency_ms": _percentiles(sorted(float(value) for value in latencies)),
        "degraded": _ints(degraded),
        "top_queries": [(query.decode(), int(count)) for query, count in top_queries],
        "no_result_queries": [(query.decode(), int(count)) for query, count in no_result],
        "window": _ints(window),
    }


def daily_costs(tenant_id: int, *, days: int, now: float | None = None) -> list[tuple[str, dict[str, float]]] | None:
    """(date, units by kind) of the tenant's last ``days`` days, oldest first; a day without use has no
    units. None while Redis is unreachable."""
    flush_counts()
    now = time.time() if now is None else now
    dates = [_day(now - 86400 * back) for back in range(days - 1, -1, -1)]
    try:
        pipeline = get_redis_connection("default").pipeline(transaction=False)
        for date in dates:
            pipeline.hgetall(cache.make_key(_key(tenant_id, f"cost:{date}")))
        rows = pipeline.execute()
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("cost counters", exc)
        return None
    return [
        (date, {kind.decode(): float(value) for kind, value in sorted(units.items())})
        for date, units in zip(dates, rows, strict=True)
    ]


def frequent_queries(tenant_id: int, count: int) -> list[str]:
    """The tenant's ``count`` most frequent recent queries (as counted: whitespace collapsed, case
    folded), the most frequent first; empty while Redis is unreachable."""
    flush_counts()
    try:
        queries = get_redis_connection("default").zrevrange(cache.make_key(_key(tenant_id, "top")), 0, count - 1)
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("query counters", exc)
        return []
    return [query.decode() for query in queries]


def _day(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(timestamp))


def _ints(mapping: dict[bytes, Any]) -> dict[str, int]:
    return {name.decode(): int(value) for name, value in sorted(mapping.items())}


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _daily_row(date: str, counts: dict[str, int], latency_buckets: dict[str, int]) -> dict[str, object]:
    cache_hits = counts.pop("cache_hits", 0)
    total = sum(counts.values())
    return {
        "date": date, "modes": counts, "total": total, "cache_hit_ratio": _ratio(cache_hits, total),
        "latency_ms": _histogram_percentiles({int(bucket): n for bucket, n in latency_buckets.items()}),
    }  # fmt: skip


def latency_bucket(latency_ms: float) -> int:
    """The histogram bucket of a latency: the least i with ``LATENCY_BUCKET_GROWTH**i >= latency_ms``."""
    return math.ceil(math.log(max(latency_ms, LATENCY_FLOOR_MS)) / math.log(LATENCY_BUCKET_GROWTH))


def _histogram_percentiles(buckets: dict[int, int]) -> dict[str, float] | None:
    """Nearest-rank p50/p95 of a day's histogram, as their buckets' upper bounds (ms, to 0.01); None
    when the day had no search."""
    searches = sum(buckets.values())
    if not searches:
        return None

    ordered = sorted(buckets.items())
    seen = list(itertools.accumulate(count for _, count in ordered))  # searches up to each bucket

    def rank(share: int) -> float:
        wanted = -(-searches * share // 100)
        bucket = next(bucket for (bucket, _), upto in zip(ordered, seen, strict=True) if upto >= wanted)
        return round(LATENCY_BUCKET_GROWTH**bucket, 2)

    return {"p50": rank(50), "p95": rank(95)}


def _percentiles(latencies: list[float]) -> dict[str, float | int]:
    """Nearest-rank percentiles; empty when nothing was served yet."""
    if not latencies:
        return {}

    def rank(share: int) -> float:
        return latencies[max(0, -(-len(latencies) * share // 100) - 1)]

    return {"p50": rank(50), "p95": rank(95), "searches": len(latencies)}
