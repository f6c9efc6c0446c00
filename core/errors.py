"""The one mapping of errors to HTTP: ``{"error": {"code", "message", "request_id"}}``.

Domain apps raise subclasses of :class:`DomainError` (each names its status and code); this module
knows none of them.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import IntegrityError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import bad_request, page_not_found, permission_denied
from rest_framework import exceptions, status
from rest_framework.response import Response

from core.request_id import request_id_of
from core.uniqueness import violated_unique_constraint

logger = logging.getLogger(__name__)


class DomainError(Exception):
    """An error a client can act on; subclasses pick the status and code."""

    status_code: int = status.HTTP_400_BAD_REQUEST
    code = "bad_request"
    retry_after_s: int | None = None  # set: the answer carries Retry-After (a 503 the client should retry)

    def __init__(self, message: str, *, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.details = details


class NotFoundError(DomainError):
    status_code = status.HTTP_404_NOT_FOUND


class ConflictError(DomainError):
    status_code = status.HTTP_409_CONFLICT


class UnavailableError(DomainError):
    """503: a backend the request cannot do without did not answer."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE


class InvalidApiKey(exceptions.PermissionDenied):
    """403, not 401: the client did authenticate, with a key that is not (or no longer) valid."""

    default_code = "invalid_api_key"


_DRF_CODES = {
    exceptions.NotAuthenticated: "missing_api_key",
    InvalidApiKey: "invalid_api_key",
    exceptions.PermissionDenied: "forbidden",
    exceptions.ParseError: "malformed_json",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.NotFound: "not_found",
    exceptions.Throttled: "rate_limited",
    exceptions.ValidationError: "invalid_request",
}


def error_body(code: str, message: str, request: object, details: object = None) -> dict[str, Any]:
    return error_document(code, message, request_id_of(request), details)


def error_document(code: str, message: str, request_id: str, details: object = None) -> dict[str, Any]:
    """The error shape, for answers made before Django has a request (the server, :mod:`core.asgi`)."""
    error: dict[str, Any] = {"code": code, "message": printable(message), "request_id": request_id}
    if details:
        error["details"] = printable(details)
    return {"error": error}


def printable(value: Any) -> Any:
    """``value`` with every string made encodable: an echoed lone surrogate becomes ``\\ud800``, never a 500."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(key): printable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(item) for item in value]
    return value


def _validation_message(detail: object) -> str:
    """Flatten DRF's nested error detail into one readable line: 'top_k: Ensure ... ; query: ...'."""
    if isinstance(detail, dict):
        parts = []
        for field, value in detail.items():
            inner = _validation_message(value)
            parts.append(inner if field == "non_field_errors" else f"{field}: {inner}")
        return "; ".join(parts)
    if isinstance(detail, list):
        return " ".join(_validation_message(item) for item in detail)
    return str(detail)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    if isinstance(exc, DomainError):
        headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
        body = error_body(exc.code, exc.message, request, exc.details)
        return Response(body, status=exc.status_code, headers=headers)
    if isinstance(exc, IntegrityError):
        return _conflict(exc, request)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("payload_too_large", "The request body is larger than the allowed maximum.", request),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    # Django's own (an unknown ?format= raises Http404): the codes and messages of DRF's equivalents.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    # Imported here: rest_framework.views loads the authentication classes, which import this module.
    from rest_framework.views import exception_handler as drf_exception_handler

    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # unexpected: Django's 500 handler answers with the same JSON shape
    code = next((code for cls, code in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, exceptions.ValidationError):
        message, details = _validation_message(exc.detail), exc.detail
    else:
        message, details = str(getattr(exc, "detail", exc)), None
    response.data = error_body(code, message, request, details)
    return response


def _conflict(exc: IntegrityError, request: object) -> Response:
    """The safety net behind the services, which map each unique constraint to their own conflict: a
    violation one of them missed is still the client's 409, never a 500."""
    constraint = violated_unique_constraint(exc)
    logger.warning("unmapped integrity error", extra={"constraint": constraint, "request_id": request_id_of(request)})
    message = "The request conflicts with stored data" + (" (a unique value is taken)." if constraint else ".")
    return Response(error_body("conflict", message, request), status=status.HTTP_409_CONFLICT)


JSON_PATHS = ("/api/", "/v1/")  # the API and the OpenAI-compatible endpoints


def json_400(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's own 400s (an unreadable or truncated body, a bad Host header) are JSON under ``JSON_PATHS``."""
    if not request.path.startswith(JSON_PATHS):
        return bad_request(request, exception)
    return JsonResponse(error_body("bad_request", "The request could not be read.", request), status=400)


def json_403(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not request.path.startswith(JSON_PATHS):
        return permission_denied(request, exception)
    return JsonResponse(error_body("forbidden", "Forbidden.", request), status=403)


def json_404(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not request.path.startswith(JSON_PATHS):
        return page_not_found(request, exception)
    return JsonResponse(error_body("not_found", "No such endpoint.", request), status=404)


def json_500(request: HttpRequest) -> HttpResponse:
    logger.error("unhandled error", extra={"request_id": request_id_of(request)})
    return JsonResponse(error_body("internal_error", "Internal server error.", request), status=500)
