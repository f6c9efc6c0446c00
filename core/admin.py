"""Admin building blocks shared by the apps' consoles."""

from __future__ import annotations

from django.db.models import Model
from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """For rows the admin shows but never writes: something else (ingestion, a console page) makes them."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
