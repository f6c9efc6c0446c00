"""The HTTP front: Django's request handling and the asyncio worker that serves it."""

from __future__ import annotations

import secrets
from pathlib import Path

from pydantic import Field, PositiveFloat, PositiveInt

from retrieval_site.settings.base import CommaList, Section


def _local_secret_key(var_dir: Path) -> str:
    """A per-checkout random key for local runs; production sets DJANGO_SECRET_KEY."""
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


class HttpFront(Section):
    title = "HTTP front"

    SECRET_KEY: str = Field(
        validation_alias="DJANGO_SECRET_KEY", default_factory=lambda data: _local_secret_key(data["VAR_DIR"])
    )
    DEBUG: bool = Field(default=False, validation_alias="DJANGO_DEBUG")
    ALLOWED_HOSTS: CommaList = Field(
        default=["127.0.0.1", "localhost", "testserver"], validation_alias="DJANGO_ALLOWED_HOSTS"
    )
    CSRF_TRUSTED_ORIGINS: CommaList = Field(default=[], validation_alias="DJANGO_CSRF_TRUSTED_ORIGINS")
    # Search requests are small; anything larger is refused with 413 before it is parsed.
    DATA_UPLOAD_MAX_MEMORY_SIZE: PositiveInt = Field(default=256 * 1024, validation_alias="MAX_REQUEST_BYTES")
    CORS_ALLOWED_ORIGINS: CommaList = []  # e.g. https://app.example.com; empty: no cross-origin calls
    # retrieval_site.asgi under gunicorn's asyncio worker: threads per worker that run Django, each on a
    # request already read whole.
    WEB_THREADS: PositiveInt = 4
    # A connection's request headers, and then a request's body, must arrive within these (else 408).
    REQUEST_HEADER_TIMEOUT_S: PositiveFloat = 10.0
    REQUEST_BODY_TIMEOUT_S: PositiveFloat = 60.0
