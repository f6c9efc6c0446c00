"""Request ids on every log line, and one structured access-log line per request.

The request-id middleware puts the id in a context variable; ``RequestIdFilter`` (installed on the
log handler in ``settings.LOGGING``) copies it onto every record, whichever logger emitted it, so a
JSON log line can be joined to the response that carried the same ``X-Request-ID``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

NO_REQUEST_ID = "-"

# Set by ``RequestIdMiddleware`` for the duration of a request; threads started for the request
# see it only when they run in a copy of the request's context (see ``retrieval.services.pools``).
request_id_var: ContextVar[str] = ContextVar("request_id", default=NO_REQUEST_ID)

access_logger = logging.getLogger("retrieval.access")


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (``-`` outside a request); never drops a record.

    Django logs 4xx/5xx responses (``django.request``) after the middleware has returned, so for
    those the id comes from the request the record carries rather than from the context.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            request = getattr(record, "request", None)
            record.request_id = getattr(request, "request_id", None) or request_id_var.get()
        return True


def tenant_of(request: HttpRequest) -> Any:
    """The tenant DRF authenticated, if any: DRF copies ``request.auth`` (the API key) onto the
    Django request, which is all a middleware sees."""
    api_key = getattr(request, "auth", None)
    return getattr(api_key, "tenant", None)


class AccessLogMiddleware:
    """One ``retrieval.access`` line per request: route, method, status, latency and tenant.

    Sits inside ``RequestIdMiddleware`` so the line carries the request id like every other line.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        latency_ms = round((time.perf_counter() - started) * 1000, 2)
        match = getattr(request, "resolver_match", None)
        tenant = tenant_of(request)
        access_logger.info(
            "%s %s %s %.1f ms",
            request.method,
            request.path,
            response.status_code,
            latency_ms,
            extra={
                "route": match.url_name if match else None,
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "latency_ms": latency_ms,
                "tenant": tenant.name if tenant else None,
                "tenant_id": tenant.pk if tenant else None,
            },
        )
        return response
