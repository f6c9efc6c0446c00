from django.urls import path

from retrieval.views import Bm25SearchView, GraphSearchView, HybridSearchView, SearchView, VectorSearchView

urlpatterns = [
    path("vector", VectorSearchView.as_view(), name="retrieval-vector"),
    path("bm25", Bm25SearchView.as_view(), name="retrieval-bm25"),
    path("hybrid", HybridSearchView.as_view(), name="retrieval-hybrid"),
    path("graph", GraphSearchView.as_view(), name="retrieval-graph"),
    path("search", SearchView.as_view(), name="retrieval-search"),
]
