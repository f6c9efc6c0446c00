"""Admin building blocks shared by the apps' consoles."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import IntegrityError
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from core.errors import ConflictError
from core.uniqueness import violated_unique_constraint


class ReadOnlyAdminMixin:
    """For rows the admin shows but never writes: something else (ingestion, a console page) makes them."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class ConflictsAnsweredAdmin(admin.ModelAdmin[Any]):
    """An add or change form that loses a uniqueness race says so instead of a 500.

    The admin's form checks uniqueness before it saves; two saves at once both pass that check, and
    the database refuses the second (or the service raises its conflict). The save is rolled back and
    the form's page opens again with the reason.
    """

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ConflictError as conflict:
            reason = str(conflict)
        except IntegrityError as error:
            constraint = violated_unique_constraint(error)
            if constraint is None:
                raise
            reason = f"another save broke the uniqueness rule {constraint} at the same moment"
        self.message_user(request, f"Not saved: {reason}. Nothing was changed; try again.", messages.ERROR)
        return HttpResponseRedirect(request.get_full_path())
