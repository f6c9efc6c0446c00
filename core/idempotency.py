"""``Idempotency-Key`` on POST: the first response is stored per tenant and replayed to retries.

A retry with the same key and the same request (method, path, JSON body) gets the stored status, body
and content type back with ``Idempotent-Replayed: true``, for ``IDEMPOTENCY_TTL_S``. The same key with
another request is a 422; a retry while the first is still running is a 409 (a Redis ``SET NX`` lock
with a TTL marks it in flight). 5xx responses are not stored, so a retry after a server error runs
again. With Redis unreachable, requests pass through unprotected (logged) rather than failing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django_redis import get_redis_connection
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import ConflictError, DomainError
from core.redis import REDIS_ERRORS, warn_redis_unavailable

if TYPE_CHECKING:
    from rest_framework.views import APIView as _View  # what the mixin is mixed into
else:
    _View = object

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
IDEMPOTENCY_KEY_PATTERN = r"^[A-Za-z0-9._:-]{1,255}$"  # also stated in the OpenAPI schema
_VALID_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_STORED_HEADERS = ("Content-Type",)
# Delete the lock only while it is still ours: after its TTL it may belong to a later request.
_RELEASE_LOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class InvalidIdempotencyKey(DomainError):
    code = "invalid_idempotency_key"


class IdempotencyKeyReused(DomainError):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    code = "idempotency_key_reused"


class IdempotencyInFlight(ConflictError):
    code = "idempotency_in_flight"


class _Replay(Exception):
    """Raised from ``initial()`` to answer with a stored response instead of running the view."""

    def __init__(self, response: HttpResponse):
        self.response = response


@dataclass
class _Claim:
    """This request holds a key's in-flight lock; its response is stored under the key."""

    record_key: str
    lock_key: str
    token: str
    fingerprint: str

    def store(self, response: HttpResponse) -> None:
        if response.status_code >= 500:
            return
        if hasattr(response, "render"):  # DRF renders lazily; rendering twice is a no-op
            response.render()
        record = {
            "fingerprint": self.fingerprint,
            "status": response.status_code,
            "headers": {name: response[name] for name in _STORED_HEADERS if name in response},
            "body": response.content.decode(),
        }
        try:
            get_redis_connection().set(self.record_key, json.dumps(record), ex=settings.IDEMPOTENCY_TTL_S)
        except REDIS_ERRORS as exc:
            warn_redis_unavailable("idempotency", exc)

    def release(self) -> None:
        try:
            get_redis_connection().eval(_RELEASE_LOCK, 1, self.lock_key, self.token)
        except REDIS_ERRORS as exc:
            warn_redis_unavailable("idempotency", exc)


class IdempotentPostMixin(_View):
    """For DRF views, after authentication and permissions: POSTs with an ``Idempotency-Key`` run once."""

    _claim: _Claim | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        key = request.headers.get(IDEMPOTENCY_HEADER)
        if request.method == "POST" and key is not None:
            self.before_idempotency(request)
            self._claim = _claim_key(request, key)

    def before_idempotency(self, request: Request) -> None:
        """Checks a view makes before the body is read for the key's fingerprint (e.g. its size)."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, _Replay):
            return exc.response  # type: ignore[return-value]  # a plain HttpResponse: DRF finalizes any
        return super().handle_exception(exc)

    def finalize_response(self, request: Request, response: Response, *args: Any, **kwargs: Any) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        if self._claim is not None:
            self._claim.store(response)
        return response

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if self._claim is not None:  # also after an unhandled error, so a retry need not wait for the TTL
                self._claim.release()


def _claim_key(request: Request, key: str) -> _Claim | None:
    """Claim ``key`` for this request, or raise: a replay, a conflict, or an invalid key."""
    if not _VALID_KEY.fullmatch(key):
        raise InvalidIdempotencyKey(
            f"{IDEMPOTENCY_HEADER} must be 1-255 characters of letters, digits and . _ : -",
            details={"header": IDEMPOTENCY_HEADER},
        )
    fingerprint = _fingerprint(request)
    api_key: Any = request.auth  # the tenants app's ApiKey
    record_key = cache.make_key(f"idempotency:{api_key.tenant_id}:{key}")
    claim = _Claim(record_key, f"{record_key}:lock", f"{fingerprint}:{uuid.uuid4().hex}", fingerprint)
    try:
        stored, holder = _read_or_lock(claim)
    except REDIS_ERRORS as exc:
        warn_redis_unavailable("idempotency", exc)
        return None
    if stored is not None:
        record = json.loads(stored)
        if record["fingerprint"] != fingerprint:
            raise IdempotencyKeyReused(f"This {IDEMPOTENCY_HEADER} was already used for a different request.")
        raise _Replay(_replayed(record))
    if holder is None:
        return claim
    if not holder.startswith(f"{fingerprint}:"):
        raise IdempotencyKeyReused(f"This {IDEMPOTENCY_HEADER} is in use for a different request.")
    raise IdempotencyInFlight(f"A request with this {IDEMPOTENCY_HEADER} is still in progress; retry shortly.")


def _read_or_lock(claim: _Claim) -> tuple[bytes | None, str | None]:
    """(stored record, None), (None, the in-flight holder's token), or (None, None): we hold the lock."""
    redis = get_redis_connection()
    for _ in range(3):
        stored = redis.get(claim.record_key)
        if stored is not None:
            return stored, None
        if redis.set(claim.lock_key, claim.token, nx=True, ex=settings.IDEMPOTENCY_LOCK_TTL_S):
            stored = redis.get(claim.record_key)  # a holder stored and released between our read and our lock
            if stored is not None:
                redis.eval(_RELEASE_LOCK, 1, claim.lock_key, claim.token)
            return stored, None
        holder = redis.get(claim.lock_key)
        if holder is not None:
            return None, holder.decode()
        # The holder finished between our lock attempt and this read: look again.
    raise IdempotencyInFlight(f"Requests with this {IDEMPOTENCY_HEADER} keep running; retry shortly.")


def _fingerprint(request: Request) -> str:
    """The API key, method, path and body; JSON bodies canonically, so key order and spacing do not
    matter; a multipart body by its fields and its files' names and contents (its boundary differs per
    retry). The key: keys of one tenant may read different documents (their principals and knowledge
    bases, docs/permissions.md), so one key's stored answer is never replayed to another."""
    digest = hashlib.sha256(f"{getattr(request.auth, 'pk', '')} {request.method} {request.path}\n".encode())
    if request.content_type.startswith("multipart/form-data"):
        for name, value in sorted(request.POST.lists()):
            digest.update(json.dumps([name, value]).encode())
        for name, uploads in sorted(request.FILES.lists()):
            for upload in uploads:
                digest.update(json.dumps([name, upload.name, upload.size]).encode())
                for block in upload.chunks():
                    digest.update(block)
                upload.seek(0)
        return digest.hexdigest()
    body = request.body
    with contextlib.suppress(ValueError, RecursionError):  # not JSON (the parser refuses it later): the raw bytes
        body = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    digest.update(body)
    return digest.hexdigest()


def _replayed(record: dict[str, Any]) -> HttpResponse:
    response = HttpResponse(record["body"], status=record["status"])
    for name, value in record["headers"].items():
        response[name] = value
    response[REPLAYED_HEADER] = "true"
    return response
