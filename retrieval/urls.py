from django.urls import path

from retrieval.views import Bm25SearchView, HybridSearchView, SearchView, VectorSearchView

urlpatterns = [
    path("vector", VectorSearchView.as_view(), name="retrieval-vector"),
    path("bm25", Bm25SearchView.as_view(), name="retrieval-bm25"),
    path("hybrid", HybridSearchView.as_view(), name="retrieval-hybrid"),
    path("search", SearchView.as_view(), name="retrieval-search"),
]
