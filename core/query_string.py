"""A query string that is not UTF-8 once percent-decoded (``?x=%ff``) is a 400 on the API.

Django decodes it with replacement characters, so ``?offset=%ff`` read as ``"\\ufffd"`` and was ignored
like any unknown value: the client never learnt its request was not what it meant."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from django.http import HttpRequest, HttpResponse, JsonResponse

from core.errors import error_body

API_PREFIX = "/api/"


class QueryStringMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        if query and request.path.startswith(API_PREFIX) and not _decodable(query):
            message = "The query string is not UTF-8 once percent-decoded."
            return JsonResponse(error_body("malformed_query_string", message, request), status=400)
        return self.get_response(request)


def _decodable(query: str) -> bool:
    try:
        # WSGI and Django's ASGI handler both hand the raw bytes over as Latin-1 text.
        unquote_to_bytes(query.encode("latin-1", "replace")).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
