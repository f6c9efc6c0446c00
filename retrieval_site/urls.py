from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/retrieval/", include("retrieval.urls")),
]

handler404 = "retrieval.exceptions.json_404"
handler500 = "retrieval.exceptions.json_500"
