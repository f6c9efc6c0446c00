from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from core.health import register_check
from core.metrics import metrics_view
from core.swagger import SwaggerUIView
from core.views import favicon_view, health_view, ready_view
from knowledge.stats_views import StatsView
from knowledge.stores import graph_store, vector_index
from knowledge.views import ID_PATTERN
from retrieval.dify import DifyRetrievalView
from retrieval.openai_vector_stores import VectorStoreDetailView, VectorStoreListView, VectorStoreSearchView
from retrieval.query_set_api import EvaluationViewSet, QuerySetViewSet, VersionGateViewSet

# The graph leg is opt-in per request: a graph store that cannot serve makes /ready "degraded".
register_check("graph_store", lambda: graph_store().ping(), required=False)
# The vector index (Milvus answers within MILVUS_TIMEOUT_S; pgvector's is the "pgvector" check).
register_check("vector_index", lambda: vector_index().ping(), required=True)

KB = rf"api/v1/knowledge-bases/(?P<kb_id>{ID_PATTERN})"  # a KB's query set and evaluation runs

admin.site.site_header = admin.site.site_title = "Retrieval service"
admin.site.index_title = "Console"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/retrieval/", include("retrieval.urls")),
    path("api/v1/dify/retrieval", DifyRetrievalView.as_view(), name="dify-retrieval"),  # Dify: endpoint …/api/v1/dify
    # An endpoint typed with a trailing slash in Dify (…/api/v1/dify/): Dify appends "/retrieval".
    path("api/v1/dify//retrieval", DifyRetrievalView.as_view(schema=None), name="dify-retrieval-slash"),
    # OpenAI's vector-store API (a KB is a vector store): base_url "http://<host>/v1" in the OpenAI SDK.
    path("v1/vector_stores", VectorStoreListView.as_view(), name="openai-vector-stores"),
    path("v1/vector_stores/<str:vector_store_id>", VectorStoreDetailView.as_view(), name="openai-vector-store"),
    path(
        "v1/vector_stores/<str:vector_store_id>/search",
        VectorStoreSearchView.as_view(),
        name="openai-vector-store-search",
    ),
    path("api/v1/stats", StatsView.as_view(), name="stats"),
    path("api/v1/", include("knowledge.urls")),
    re_path(rf"^{KB}/query-set$", QuerySetViewSet.as_view({"get": "whole_set"}), name="query-set"),
    re_path(
        rf"^{KB}/query-set/judgments$",
        QuerySetViewSet.as_view({"post": "judge"}),
        name="query-set-judgments",
    ),
    re_path(
        rf"^{KB}/query-set/import$",
        QuerySetViewSet.as_view({"post": "import_file"}),
        name="query-set-import",
    ),
    re_path(
        rf"^{KB}/evaluations$",
        EvaluationViewSet.as_view({"get": "list", "post": "create"}),
        name="evaluation-list",
    ),
    re_path(
        rf"^{KB}/evaluations/(?P<pk>{ID_PATTERN})$",
        EvaluationViewSet.as_view({"get": "retrieve"}),
        name="evaluation-detail",
    ),
    re_path(
        rf"^{KB}/evaluations/(?P<pk>{ID_PATTERN})/threshold$",
        EvaluationViewSet.as_view({"post": "threshold"}),
        name="evaluation-threshold",
    ),
    re_path(
        rf"^{KB}/versions/(?P<number>{ID_PATTERN})/gate$",
        VersionGateViewSet.as_view({"get": "retrieve", "post": "create"}),
        name="version-gate",
    ),
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
