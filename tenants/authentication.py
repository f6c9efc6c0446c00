"""API-key authentication for DRF: the key alone decides the tenant of a request."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from rest_framework import authentication, permissions

from core.errors import InvalidApiKey
from tenants.models import ApiKey, Tenant
from tenants.requests import TenantRequest
from tenants.selectors import ReadAlong, api_key_for
from tenants.services import record_api_key_use

if TYPE_CHECKING:  # DRF's views import this module (DEFAULT_AUTHENTICATION_CLASSES)
    from rest_framework.request import Request
    from rest_framework.views import APIView


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Reads ``Authorization: Bearer <key>`` (or ``X-API-Key``). Missing key -> 401, bad key -> 403."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Tenant, ApiKey] | None:
        raw_key = self._raw_key(request)
        if raw_key is None:
            return None
        along = _read_along(request)
        api_key = api_key_for(raw_key, along)
        if api_key is None:
            raise InvalidApiKey("The API key is invalid, expired or revoked.")
        record_api_key_use(api_key)
        authenticated = cast(TenantRequest, request)  # what HasTenant's views receive
        authenticated.tenant = api_key.tenant
        authenticated.read_along = along.rows if along is not None else None
        return (api_key.tenant, api_key)

    def authenticate_header(self, request: Request) -> str:
        return self.keyword

    def _raw_key(self, request: Request) -> str | None:
        header: str = request.META.get("HTTP_AUTHORIZATION", "")
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != self.keyword.lower() or not value.strip():
                raise InvalidApiKey("The Authorization header must be 'Bearer <api key>'.")
            return value.strip()
        value = request.META.get("HTTP_X_API_KEY", "").strip()
        return value or None


def _read_along(request: Request) -> ReadAlong | None:
    """What the endpoint reads of the tenant on every request (its view's ``read_along()``), sent with
    the key's check; ``request.read_along`` gets the rows (None when the key was read in full)."""
    read_along: Callable[[], ReadAlong] | None = getattr(request.parser_context.get("view"), "read_along", None)
    return read_along() if read_along is not None else None


class HasTenant(permissions.BasePermission):
    """Every API call needs a tenant; without a key DRF answers 401 with ``WWW-Authenticate``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None
