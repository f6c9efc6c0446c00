"""Rate limits per tenant and endpoint: fixed windows counted in Redis, tiers in the database.

Calls are counted right after authentication and before permissions, so unauthenticated calls and
bad keys are limited too, per client IP (``RATE_LIMIT_ANONYMOUS``). Every response of a limited endpoint
carries ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset`` (seconds until the window rolls over);
over the limit is a 429 ``rate_limited`` with ``Retry-After``. With Redis unreachable,
``RATE_LIMIT_FAIL_OPEN`` decides: serve unlimited (logged), or refuse with 503 and ``Retry-After``;
calls without a valid key still get their 401/403, never a 503 hiding why they are refused.

The count is one Redis round trip, and a view may read cache entries in that same round trip
(:meth:`RateLimitedMixin.rate_limit_reads`): a cached search costs one round trip, not two.
"""
from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django_redis import get_redis_connection
from rest_framework import exceptions, status

from core.errors import DomainError
from core.redis import REDIS_ERRORS, warn_redis_unavailable

ANONYMOUS = "anonymous"  # the counter group of calls without a valid key
# A window's counter outlives the window by this much, so a late increment never re-creates it without a TTL.
_COUNTER_SLACK_S = 5


class RateLimiterUnavailable(DomainError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = "rate_limiter_unavailable"
    retry_after_s = 5


@dataclass(frozen=True)
class RateLimitUsage:
    limit: int
    remaining: int
    reset_s: int  # seconds until the window rolls over
    exceeded: bool

    def headers(self) -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset_s),
        }


class RateLimitedMixin:
    """For DRF views: count each call against the caller's limit for ``rate_limit_endpoint``."""

    # What ``rate_limit_reads`` asked for, as Redis held it while the call was counted (None: absent).
    read_along: dict[str, object]

    def rate_limit_endpoint(self, request) -> str:
        """The counter (and ``endpoint_limits`` entry) an authenticated call counts against."""
        raise NotImplementedError

    def rate_limit_reads(self, request) -> Sequence[str]:
        """Cache keys (as given to ``django.core.cache``) to read in the round trip that counts an
        authenticated call; their values land in ``read_along``. Must not raise."""
        return ()

    def perform_authentication(self, request) -> None:
        self.read_along = {}
        try:
            super().perform_authentication(request)
        except exceptions.APIException:
            self._count(request, ANONYMOUS)  # a bad key counts against the caller's address
            raise
        if request.auth is None:
            self._count(request, ANONYMOUS)
        else:
            self._count(request, self.rate_limit_endpoint(request), self.rate_limit_reads(request))

    def _count(self, request, endpoint: str, reads: Sequence[str] = ()) -> None:
        usage, self.read_along = count_call(request, endpoint, reads)
        if usage is None:
            return
        self.headers.update(usage.headers())  # DRF adds these to whatever response follows
        if usage.exceeded:
            who = "unauthenticated requests from this address" if endpoint == ANONYMOUS else f"{endpoint} requests"
            raise exceptions.Throttled(
                wait=usage.reset_s,
                detail=f"Rate limit of {usage.limit} {who} per {settings.RATE_LIMIT_WINDOW_S} s exceeded.",
            )


def count_call(
    request, endpoint: str, reads: Sequence[str] = ()
) -> tuple[RateLimitUsage | None, dict[str, object]]:
    """Count this call and read ``reads``, in one round trip. The usage is None when Redis is
    unreachable and the limiter fails open (else 503); the reads are then empty."""
    if endpoint == ANONYMOUS:
        # No peer address (a server on a unix socket behind a proxy): all such callers share one counter.
        who, limit = f"ip:{request.META.get('REMOTE_ADDR') or 'no-address'}", settings.RATE_LIMIT_ANONYMOUS
    else:
        who, limit = f"tenant:{request.auth.tenant_id}", request.auth.tenant.rate_tier.limit_for(endpoint)
    period = settings.RATE_LIMIT_WINDOW_S
    window_end, time_left = _window(who, period)
    counter = cache.make_key(f"ratelimit:{endpoint}:{limit}:{who}:{window_end}")
    try:
        pipeline = get_redis_connection("default").pipeline(transaction=False)
        pipeline.set(counter, 0, ex=time_left + _COUNTER_SLACK_S, nx=True)
        pipeline.incr(counter)
        for key in reads:
            pipeline.get(cache.make_key(key))
        _, count, *values = pipeline.execute()
    except REDIS_ERRORS as exc:
        return _unavailable(exc, endpoint), {}
    usage = RateLimitUsage(
        limit=limit,
        remaining=max(0, limit - count),
        # The window ends after second `time_left` from now: the counter resets within time_left + 1 s.
        reset_s=time_left + 1,
        exceeded=count > limit,
    )
    return usage, {key: None if value is None else cache.client.decode(value) for key, value in zip(reads, values)}


def _window(who: str, period: int) -> tuple[int, int]:
    """(end of the current window, whole seconds left in it): fixed windows of ``period`` seconds,
    shifted per caller (a CRC of ``who``) so that not every counter resets in the same second."""
    now = int(time.time())
    end = now - now % period + zlib.crc32(who.encode()) % period
    if end < now:
        end += period
    return end, end - now


def _unavailable(exc: BaseException, endpoint: str) -> None:
    warn_redis_unavailable("rate limiting", exc)
    # An anonymous call is refused anyway (401 or 403): failing closed must not hide why.
    if not settings.RATE_LIMIT_FAIL_OPEN and endpoint != ANONYMOUS:
        raise RateLimiterUnavailable("Rate limiting is unavailable; retry shortly.") from exc
