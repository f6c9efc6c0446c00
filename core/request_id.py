"""Request IDs: accepted from ``X-Request-ID`` when sane, generated otherwise, echoed on every response."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from core.logging import request_id_var

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_of(request: object) -> str:
    return str(getattr(request, "request_id", ""))


def accepted_request_id(incoming: str) -> str:
    """The client's ``X-Request-ID`` when it is sane, else a new one."""
    return incoming if _VALID_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = accepted_request_id(request.headers.get(REQUEST_ID_HEADER, ""))
        request.request_id = request_id  # type: ignore[attr-defined]  # read back by request_id_of
        token = request_id_var.set(request_id)  # every log line of the request carries it
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response
