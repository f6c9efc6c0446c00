"""Rate limits per tenant and endpoint: django-ratelimit's fixed windows in Redis, tiers in the database.

Calls are counted right after authentication and before permissions, so unauthenticated calls and
bad keys are limited too, per client IP (``RATE_LIMIT_ANONYMOUS``). Every response of a limited endpoint
carries ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset`` (seconds until the window rolls over);
over the limit is a 429 ``rate_limited`` with ``Retry-After``. With Redis unreachable,
``RATE_LIMIT_FAIL_OPEN`` decides: serve unlimited (logged), or refuse with 503 and ``Retry-After``;
calls without a valid key still get their 401/403, never a 503 hiding why they are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django_ratelimit.core import get_usage
from rest_framework import exceptions
from rest_framework.request import Request

from core.errors import UnavailableError
from core.redis import REDIS_ERRORS, warn_redis_unavailable

if TYPE_CHECKING:
    from rest_framework.views import APIView as _View  # what the mixin is mixed into
else:
    _View = object

ANONYMOUS = "anonymous"  # the counter group of calls without a valid key
# What django-ratelimit answers when the counter could not be read or written and it fails closed (a
# negative time_left alone is a call that ran past its window's end, not a failure).
_FAILED_CLOSED = {"count": 0, "limit": 0, "should_limit": True, "time_left": -1}


class RateLimiterUnavailable(UnavailableError):
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


class RateLimitedMixin(_View):
    """For DRF views: count each call against the caller's limit for ``rate_limit_endpoint``."""

    def rate_limit_endpoint(self, request: Request) -> str:
        """The counter (and ``endpoint_limits`` entry) an authenticated call counts against."""
        raise NotImplementedError

    def counts_against_limit(self, request: Request) -> bool:
        """False: an authenticated call checked against the limit but not counted (a client's blind
        retry of a call counted already)."""
        return True

    def perform_authentication(self, request: Request) -> None:
        try:
            super().perform_authentication(request)
        except exceptions.APIException:
            self._count(request, ANONYMOUS)  # a bad key counts against the caller's address
            raise
        if request.auth is None:
            self._count(request, ANONYMOUS)
        else:
            self._count(request, self.rate_limit_endpoint(request), increment=self.counts_against_limit(request))

    def _count(self, request: Request, endpoint: str, *, increment: bool = True) -> None:
        usage = count_call(request, endpoint, increment=increment)
        if usage is None:
            return
        self.headers.update(usage.headers())  # DRF adds these to whatever response follows
        if usage.exceeded:
            who = "unauthenticated requests from this address" if endpoint == ANONYMOUS else f"{endpoint} requests"
            raise exceptions.Throttled(
                wait=usage.reset_s,
                detail=f"Rate limit of {usage.limit} {who} per {settings.RATE_LIMIT_WINDOW_S} s exceeded.",
            )


def count_call(request: Request, endpoint: str, *, increment: bool = True) -> RateLimitUsage | None:
    """Count this call (``increment`` False: only check it). None: Redis is unreachable and the limiter
    fails open (else 503)."""
    if endpoint == ANONYMOUS:
        # No peer address (a server on a unix socket behind a proxy): all such callers share one counter.
        key = "ip" if request.META.get("REMOTE_ADDR") else (lambda group, request: "no-address")
        limit = settings.RATE_LIMIT_ANONYMOUS
    else:
        api_key: Any = request.auth  # the tenants app's ApiKey
        tenant_key = f"tenant:{api_key.tenant_id}"
        key, limit = (lambda group, request: tenant_key), api_key.tenant.rate_tier.limit_for(endpoint)
    try:
        usage = get_usage(
            request, group=endpoint, key=key, rate=(limit, settings.RATE_LIMIT_WINDOW_S), increment=increment
        )
    except REDIS_ERRORS as exc:
        _unavailable(exc, endpoint)
        return None
    if usage is None or usage == _FAILED_CLOSED:  # django-ratelimit's fail-open / fail-closed answers
        _unavailable(RuntimeError("the rate-limit counter could not be updated"), endpoint)
        return None
    return RateLimitUsage(
        limit=limit,
        remaining=max(0, limit - usage["count"]),
        # The window ends after second `time_left` from now: the counter resets within time_left + 1 s. A
        # call that took longer than its window's last second reads a negative time_left: the next window.
        reset_s=max(usage["time_left"], 0) + 1,
        exceeded=usage["should_limit"],
    )


def _unavailable(exc: BaseException, endpoint: str) -> None:
    warn_redis_unavailable("rate limiting", exc)
    # An anonymous call is refused anyway (401 or 403): failing closed must not hide why.
    if not settings.RATE_LIMIT_FAIL_OPEN and endpoint != ANONYMOUS:
        raise RateLimiterUnavailable("Rate limiting is unavailable; retry shortly.") from exc
