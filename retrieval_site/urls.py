from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from core.health import register_check
from core.metrics import metrics_view
from core.swagger import SwaggerUIView
from core.views import favicon_view, health_view, ready_view
from knowledge.stats_views import StatsView
from knowledge.stores import graph_store
from retrieval.dify import DifyRetrievalView

# The graph leg is opt-in per request: a graph store that cannot serve makes /ready "degraded".
register_check("graph_store", lambda: graph_store().ping(), required=False)

admin.site.site_header = admin.site.site_title = "Retrieval service"
admin.site.index_title = "Console"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/retrieval/", include("retrieval.urls")),
    path("api/v1/dify/retrieval", DifyRetrievalView.as_view(), name="dify-retrieval"),  # Dify: endpoint …/api/v1/dify
    # An endpoint typed with a trailing slash in Dify (…/api/v1/dify/): Dify appends "/retrieval".
    path("api/v1/dify//retrieval", DifyRetrievalView.as_view(schema=None), name="dify-retrieval-slash"),
    path("api/v1/stats", StatsView.as_view(), name="stats"),
    path("api/v1/", include("knowledge.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SwaggerUIView.as_view(url_name="schema"), name="docs"),
    path("health", health_view, name="health"),
    path("ready", ready_view, name="ready"),
    path("metrics", metrics_view, name="metrics"),
    path("favicon.ico", favicon_view, name="favicon"),
]

handler400 = "core.errors.json_400"
handler403 = "core.errors.json_403"
handler404 = "core.errors.json_404"
handler500 = "core.errors.json_500"
