"""Search result cache in Redis (django-redis), in front of :func:`retrieval.services.search.search`.

The key hashes the normalized request (every option, expansion switches resolved), the tenant, the id and
``revision`` of every active KB version searched (``searched_knowledge``, which a miss hands on to the
search), the tenant's vocabulary stamp, the fusion settings the search will use (``retrieval.tuning``),
the ranking settings (``settings.RANKING_SETTINGS``) and the stored response's fields. Every content
change bumps a revision or the stamp, so old entries become unreachable rather than stale; they expire
with ``SEARCH_CACHE_TTL_S``.

An entry is the response's JSON body as rendered, without its stage timings: a hit sends those bytes with
its own fields appended, never decoding them. A response naming a degradation is not stored (a transient
failure must not be served for an hour). Concurrent identical misses compute once: the first takes a
short lock in the same Redis round trip as its lookup, the others poll for its result (and compute
themselves if it is slow). A computed answer is stored, and its lock released, by a writer thread
(``core.background``, ``SEARCH_CACHE_WRITE_*``) after the response is sent: the request never waits for
that round trip, nor for the semantic cache's row of the answer (saved by the same writer once the answer
is in Redis), and a write Redis or the database refuses is counted, never raised. With Redis unreachable, searches
run uncached. ``search()`` itself stays
uncached for callers that measure it (the evaluation harness).

After an exact miss, the semantic cache (``retrieval.semantic_cache``, per KB) may answer with a close
enough query's entry (``cached == "semantic"``); otherwise its lookup's query vector goes on to the search.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, cast

from django.conf import settings
from django.core.cache import cache
from django.core.signals import setting_changed
from django.db import DatabaseError
from django.dispatch import receiver
from django_redis import get_redis_connection
from django_redis.cache import RedisCache
from rest_framework.renderers import JSONRenderer

from core.background import BackgroundWriter
from core.metrics import record_search_cache_write_dropped
from core.redis import REDIS_ERRORS, warn_redis_unavailable
from knowledge.selectors.search import SearchedKnowledge, searched_knowledge
from retrieval import relevance_calibration, semantic_cache
from retrieval.models import SemanticCacheEntry
from retrieval.search_log import FACTS, answer_facts, record_search
from retrieval.semantic_cache import SemanticHit
from retrieval.services.planning import searched_settings
from retrieval.services.search import search
from retrieval.services.timings import StageTimings
from retrieval.types import SearchHit, SearchRequest, SearchResponse
from tenants.models import Tenant

_EXPANDERS = ("synonyms", "spelling", "llm")
# Entries outlive deploys: a change of the stored shape must not load old entries into new classes.
_SHAPE = [field.name for field in fields(SearchResponse)] + [field.name for field in fields(SearchHit)]
_STORED_AS = "rendered JSON without the timings"  # in the key, like the shape: a new format, new keys
# A response's fields that describe its computation: rendered per answer, after the stored ones.
_TIMINGS = ("timings_ms", "critical_path_ms")
_LOCK_TTL_S = 10  # only guards the stampede; a slow holder's lock lapses and others compute
_POLL_S = 0.05

logger = logging.getLogger(__name__)


class CachedSearch:
    """A search's answer: ``response`` computed, or (a hit) rendered as stored and decoded only when read.
    ``cached``: False, True (an exact hit) or ``"semantic"`` (``semantic``: the cached query reused)."""

    def __init__(self, response: SearchResponse | None = None, *, cached: bool | str = False,
                 stored: tuple[dict[str, Any], bytes] | None = None, elapsed_ms: float = 0.0,
                 semantic: SemanticHit | None = None):  # fmt: skip
        self.cached = cached
        self.semantic = semantic
        self._elapsed_ms = elapsed_ms
        if response is not None:
            self.response = response  # cached_property's slot
        # (summary, rendered): the hit count and searched text (what usage counters read), and the bytes.
        self._stored = stored

    @functools.cached_property
    def response(self) -> SearchResponse:
        assert self._stored is not None  # a computed answer's response was set
        return _load(self._stored[1], elapsed_ms=self._elapsed_ms)

    @functools.cached_property
    def stored(self) -> tuple[dict[str, Any], bytes]:
        """What the cache keeps of this answer (a hit's own, a computed one's rendered once)."""
        if self._stored is not None:
            return self._stored
        as_dict = self.response.as_dict()
        rendered = JSONRenderer().render({name: value for name, value in as_dict.items() if name not in _TIMINGS})
        texts = [query["text"] for query in self.response.queries[:1]]
        summary = {"total": len(self.response.results), "query": texts[0] if texts else "", **self.facts}
        return summary, rendered

    @functools.cached_property
    def facts(self) -> dict[str, Any]:
        """What the search analytics keep of the answer (``retrieval.search_log.answer_facts``)."""
        if self._stored is not None:
            return {name: self._stored[0].get(name) for name in FACTS}  # an entry stored before they were kept: None
        return answer_facts(self.response)

    @property
    def total(self) -> int:
        """The number of hits (read from what is stored, so a hit is not decoded for it)."""
        total: int = self.stored[0]["total"]
        return total

    @property
    def query(self) -> str:
        """The searched text, as the response's first query names it."""
        query: str = self.stored[0]["query"]
        return query

    def rendered(self, **fields: Any) -> bytes:
        """The answer as the API renders it (DRF's ``JSONRenderer``), ``fields`` after the response's own:
        a hit's bytes as stored with its timings and ``fields`` joined on, never decoded and re-encoded."""
        if self._stored is not None:
            elapsed = round(self._elapsed_ms, 3)
            timings = {"timings_ms": {"cache": elapsed, "total": elapsed}, "critical_path_ms": {"cache": elapsed}}
        else:
            timings = {name: getattr(self.response, name) for name in _TIMINGS}
        tail = JSONRenderer().render({**timings, **fields})
        return self.stored[1][:-1] + b"," + tail[1:]


def cached_search(
    tenant: Tenant, request: SearchRequest, knowledge: SearchedKnowledge | None = None, *, logged: bool = True
) -> CachedSearch:
    """``search()`` through the result cache; ``knowledge``: ``searched_knowledge`` for this request if
    the caller read it already (the API's view reads it first). ``logged``: the answer goes to
    the search analytics (``retrieval.search_log``; not the console's own tests)."""
    outcome = _cached_search(tenant, request, knowledge)
    if logged:
        hits = outcome.total if outcome.cached else len(outcome.response.results)  # a computed one: not rendered for it
        record_search(tenant, request, hits, outcome.facts)
    return outcome


def _cached_search(tenant: Tenant, request: SearchRequest, knowledge: SearchedKnowledge | None) -> CachedSearch:
    if settings.SEARCH_CACHE_TTL_S <= 0:
        return CachedSearch(search(tenant, request, knowledge))
    started = time.perf_counter()
    if knowledge is None:
        knowledge = searched_knowledge(tenant, request.kb_ids, request.reachable_kb_ids)
    material = _key_material(tenant, request, knowledge)
    key = _key(tenant, material)
    lock_key = f"{key}:lock"
    try:
        hit, holds_lock = _get_or_lock(key, lock_key)
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("search cache", exc)
        return CachedSearch(search(tenant, request, knowledge))
    if hit is not None:
        return CachedSearch(cached=True, stored=hit, elapsed_ms=(time.perf_counter() - started) * 1000)
    timings = StageTimings(origin=started)  # a miss's total includes the semantic lookup
    try:
        lookup = semantic_cache.prepare(tenant, request, knowledge, _scope(material), timings)
        found = None if lookup is None else semantic_cache.find(tenant, lookup, timings)
        if found is not None:
            if holds_lock:
                _tolerating_redis_errors(cache.delete, lock_key)
            semantic, stored = found
            elapsed_ms = (time.perf_counter() - started) * 1000
            return CachedSearch(cached=semantic_cache.KIND, stored=stored, elapsed_ms=elapsed_ms, semantic=semantic)
        embedded = None if lookup is None else lookup.vector  # embedded once: the dense leg's vector
        response = search(tenant, request, knowledge, embedded=embedded, timings=timings)
    except BaseException:
        if holds_lock:
            _tolerating_redis_errors(cache.delete, lock_key)
        raise
    outcome = CachedSearch(response)
    if holds_lock or not response.degraded:
        kept = not response.degraded
        entry = semantic_cache.entry(tenant, lookup, request.query, key) if lookup and kept else None
        _tolerating_redis_errors(
            _queue_store, key, outcome.stored if kept else None, lock_key if holds_lock else None, entry
        )
    return outcome


def search_cache_key(tenant: Tenant, request: SearchRequest, knowledge: SearchedKnowledge) -> str:
    """The key of ``request``'s answer over ``knowledge`` (``searched_knowledge``, which raises
    ``KnowledgeBaseNotFound`` for KB ids the tenant does not have, like the search would)."""
    return _key(tenant, _key_material(tenant, request, knowledge))


def _key(tenant: Tenant, material: dict[str, Any]) -> str:
    return f"search:{tenant.pk}:{_digest(material)}"


def _key_material(tenant: Tenant, request: SearchRequest, knowledge: SearchedKnowledge) -> dict[str, Any]:
    """Everything the answer depends on, as JSON-ready values: what the key digests."""
    # Shallow copies (``vars``, not ``asdict``'s deep ones): the same JSON, for a third of the key's cost.
    expand = dict(vars(request.expand))
    for name in _EXPANDERS:
        if expand[name] is None:
            expand[name] = getattr(tenant, f"expand_{name}")
    normalized = {
        **vars(request),
        "query": " ".join(request.query.split()),
        "kb_ids": sorted(set(request.kb_ids or ())),
        "expand": expand,
        "query_vector": vars(request.query_vector) if request.query_vector else None,
    }
    return {
        "tenant": tenant.pk,
        "request": normalized,
        "versions": sorted((version.version_id, version.revision) for version in knowledge.versions),
        "vocabulary": knowledge.vocabulary_stamp,
        # The fusion settings the search will run with (the request's, its KBs', the service's).
        "fusion": vars(searched_settings(request, knowledge)),
        # A restart with new ranking settings must not serve rankings made under the old ones.
        "settings": _service_material(),
    }


def _scope(material: dict[str, Any]) -> str:
    """The semantic cache's scope of a request: its key's material but the query (text or vector)."""
    return _digest({**material, "request": {**material["request"], "query": None, "query_vector": None}})


def _digest(material: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


@functools.cache
def _service_material() -> str:
    """The ranking settings' values, the stored shape and format, as JSON: the same for every request of a
    process, read once (and again when a setting changes: tests)."""
    return json.dumps(
        {
            "settings": {name: getattr(settings, name) for name in settings.RANKING_SETTINGS},
            "shape": _SHAPE,
            "stored_as": _STORED_AS,
            # the scale ``relevance`` is shown and thresholded on: a re-fit must not serve the old one's
            "relevance_scale": [relevance_calibration.SLOPE, relevance_calibration.INTERCEPT],
        },
        sort_keys=True,
        default=str,
    )


@receiver(setting_changed)
def _forget_service_material(**kwargs: object) -> None:
    _service_material.cache_clear()


# The entry, or nil having taken the lock (1) or not (0): a hit and a miss's lock in one round trip.
_GET_OR_LOCK = """
local value = redis.call('GET', KEYS[1])
if value then return {value, 0} end
return {false, redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', ARGV[2]) and 1 or 0}
"""


def _get_or_lock(key: str, lock_key: str) -> tuple[tuple[dict[str, Any], bytes] | None, bool]:
    """(cached value, False), or (None, True) holding the lock, or (None, False): compute without it."""
    redis = get_redis_connection("default")
    hit, locked = redis.eval(
        _GET_OR_LOCK, 2, cache.make_key(key), cache.make_key(lock_key), _redis_cache().client.encode(1), _LOCK_TTL_S
    )
    if hit is not None:
        return _redis_cache().client.decode(hit), False
    if locked:
        return None, True
    deadline = time.monotonic() + settings.SEARCH_CACHE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(_POLL_S)
        values = cache.get_many([key, lock_key])
        if key in values:
            return values[key], False
        if lock_key not in values:  # the holder finished without storing (a degraded answer) or gave up
            break
    return None, False


@dataclass(frozen=True)
class _Store:
    """One answer for the writer to store, bound on the request thread to the request's Redis client and
    full keys (the cache settings it was computed under, whenever the writer gets to it)."""

    redis: Any
    encode: Callable[[object], bytes]
    key: str
    value: tuple[dict[str, Any], bytes] | None  # None: only the lock to release (a degraded answer)
    lock_key: str | None
    ttl_s: int
    semantic: SemanticCacheEntry | None  # the semantic cache's row for this answer, saved once it is stored


def _queue_store(
    key: str,
    value: tuple[dict[str, Any], bytes] | None,
    lock_key: str | None,
    semantic: SemanticCacheEntry | None = None,
) -> None:
    """Hand ``value`` (unless None), the release of ``lock_key`` (unless None) and the semantic cache's
    row (unless None) to the writer. Dropped (a full queue), the lock is released here, so that identical
    searches compute rather than wait."""
    queued = writer.put(
        _Store(get_redis_connection("default"), _redis_cache().client.encode, cache.make_key(key), value,
               cache.make_key(lock_key) if lock_key else None, settings.SEARCH_CACHE_TTL_S, semantic)
    )  # fmt: skip
    if not queued and lock_key:
        cache.delete(lock_key)


def _store(batch: list[_Store]) -> int:
    """Store the entries and release their locks, one round trip per Redis server, then save the semantic
    cache's rows of the stored answers in one statement; how many were stored. Redis down or refusing (its
    breaker open included), or the database refusing the rows: counted and warned, never raised."""
    by_server: dict[int, list[_Store]] = {}
    for entry in batch:  # django-redis shares one connection pool per server between its clients
        by_server.setdefault(id(entry.redis.connection_pool), []).append(entry)
    stored = 0
    semantic: list[SemanticCacheEntry] = []
    for entries in by_server.values():
        pipeline = entries[0].redis.pipeline(transaction=False)
        for entry in entries:
            if entry.value is not None:
                pipeline.set(entry.key, entry.encode(entry.value), ex=entry.ttl_s)
            if entry.lock_key:
                pipeline.delete(entry.lock_key)
        try:
            pipeline.execute()
        except REDIS_ERRORS as exc:
            warn_redis_unavailable("search cache", exc)
            record_search_cache_write_dropped("failed", len(entries))
            continue
        stored += len(entries)
        semantic += [entry.semantic for entry in entries if entry.semantic is not None]
    if semantic:
        try:
            semantic_cache.remember(semantic)
        except DatabaseError:
            logger.warning("semantic cache: %d rows not saved", len(semantic), exc_info=True)
            record_search_cache_write_dropped("semantic_failed", len(semantic))
    return stored


writer: BackgroundWriter[_Store] = BackgroundWriter(
    "search-cache", "SEARCH_CACHE_WRITE", _store, record_search_cache_write_dropped
)


def _load(value: bytes, *, elapsed_ms: float) -> SearchResponse:
    data = json.loads(value)
    data["results"] = [SearchHit(**hit) for hit in data["results"]]
    # The stored stage timings describe a computation this request did not do.
    data["timings_ms"] = {"cache": round(elapsed_ms, 3), "total": round(elapsed_ms, 3)}
    data["critical_path_ms"] = {"cache": round(elapsed_ms, 3)}
    return SearchResponse(**data)


def _redis_cache() -> RedisCache:
    """The default cache as what it is (django-redis, by the CACHES setting), which Django's type of ``cache`` does not know."""
    return cast(RedisCache, cache)


def _tolerating_redis_errors(operation: Callable[..., object], *args: Any) -> None:
    try:
        operation(*args)
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("search cache", exc)
