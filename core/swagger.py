"""The Swagger UI page of the OpenAPI schema (DRF's views import the metadata class: it lives apart)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.renderers import JSONRenderer


class SwaggerUIView(SpectacularSwaggerView):
    """The Swagger UI page; its OPTIONS answers in JSON like every other route (its HTML renderer has no
    template for metadata: an OPTIONS was a 500)."""

    def get_renderers(self) -> list[Any]:
        if self.request.method == "OPTIONS":
            return [JSONRenderer()]
        return super().get_renderers()
