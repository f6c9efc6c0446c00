"""What OPTIONS answers on every API route: the methods allowed and where the OpenAPI schema lives.

DRF's default metadata describes a view's serializer, which views with one serializer per action do not
declare (an OPTIONS was a 500); the schema already says all that, so OPTIONS points at it."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework.metadata import BaseMetadata
from rest_framework.request import Request


class SchemaPointerMetadata(BaseMetadata):
    def determine_metadata(self, request: Request, view: Any) -> dict[str, Any]:
        return {"methods": list(view.allowed_methods), "schema": reverse("schema")}
