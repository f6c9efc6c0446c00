"""The service's JSON errors (``{"error": {"code", "message", "request_id"}}``) as exceptions, by status."""

from __future__ import annotations

from typing import Any


class RetrievalError(Exception):
    """An error answer of the service (``status`` is None when no answer arrived)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        request_id: str | None = None,
        details: Any = None,
        retry_after: float | None = None,
    ):
        super().__init__(f"{code}: {message}" + (f" (request {request_id})" if request_id else ""))
        self.message, self.code, self.status = message, code, status
        self.request_id, self.details, self.retry_after = request_id, details, retry_after


class InvalidRequestError(RetrievalError):
    """400, 409, 413, 415, 422: fix the request (bad body or filter, reused idempotency key, ...)."""


class AuthenticationError(RetrievalError):
    """401 / 403: missing, invalid or revoked key, or a key without the scope."""


class NotFoundError(RetrievalError):
    """404: a knowledge base the key's tenant does not have, or an unknown path."""


class RateLimitedError(RetrievalError):
    """429 after the retries: ``retry_after`` says when the window rolls over."""


class ServiceUnavailableError(RetrievalError):
    """503 after the retries: the mode's only retriever (or the rate limiter) is down."""


class ServerError(RetrievalError):
    """Any other 5xx."""


class TransportError(RetrievalError):
    """No answer: connection refused, timed out, or broken (``status`` is None)."""


_BY_STATUS = {401: AuthenticationError, 403: AuthenticationError, 404: NotFoundError, 429: RateLimitedError,
              503: ServiceUnavailableError}  # fmt: skip


def error_for(status: int, body: Any, *, request_id: str | None, retry_after: float | None) -> RetrievalError:
    """The exception for an error answer; a body that is not the service's JSON keeps its status."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"http_{status}", "message": str(body)[:500] if body else f"HTTP {status}"}
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else InvalidRequestError)
    return cls(
        str(error.get("message", "")),
        code=str(error.get("code", f"http_{status}")),
        status=status,
        request_id=error.get("request_id") or request_id,
        details=error.get("details"),
        retry_after=retry_after,
    )
