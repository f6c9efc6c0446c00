"""WSGI middleware: a request body sent with ``Transfer-Encoding: chunked`` is read, not dropped.

gunicorn de-chunks the body, but a chunked request has no ``Content-Length`` and Django reads exactly
``Content-Length`` bytes: it saw an empty body ("query: This field is required"). The body is read
here, at most one byte past ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (so a larger one still gets Django's 413),
and handed on with its length.
"""
from __future__ import annotations

import io

from django.conf import settings


class ChunkedBodyMiddleware:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not environ.get("CONTENT_LENGTH"):
            body = environ["wsgi.input"].read(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)
