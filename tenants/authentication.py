"""API-key authentication for DRF: the key alone decides the tenant of a request."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rest_framework import authentication, permissions

from core.errors import InvalidApiKey
from tenants.models import ApiKey, Tenant
from tenants.requests import TenantRequest
from tenants.selectors import api_key_for
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
        api_key = api_key_for(raw_key)
        if api_key is None:
            raise InvalidApiKey("The API key is invalid, expired or revoked.")
        record_api_key_use(api_key)
        authenticated = cast(TenantRequest, request)  # what HasTenant's views receive
        authenticated.tenant = api_key.tenant
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


class HasTenant(permissions.BasePermission):
    """Every API call needs a tenant; without a key DRF answers 401 with ``WWW-Authenticate``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.auth is not None
