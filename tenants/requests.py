"""The request an API view receives once ``ApiKeyAuthentication`` has run: DRF's ``Request`` with the
tenant and the key typed, so views annotate ``request: TenantRequest`` instead of reading ``Any``."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from rest_framework.request import Request

from tenants.models import ApiKey, Tenant


class TenantRequest(Request):
    """Never built: a type for ``request`` in views behind ``HasTenant`` (authentication set both)."""

    tenant: Tenant
    auth: ApiKey


class ConsoleRequest(HttpRequest):
    """Never built: a type for ``request`` in the console's admin views, which ``admin_site.admin_view``
    lets in only for a logged-in staff user."""

    user: User
