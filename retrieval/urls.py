from django.urls import path

from retrieval.views import VectorSearchView

urlpatterns = [
    path("vector", VectorSearchView.as_view(), name="retrieval-vector"),
]
