from django.urls import re_path
from rest_framework.routers import SimpleRouter

from knowledge.chunk_views import ChunkViewSet
from knowledge.text_views import DocumentTextView
from knowledge.views import (
    ID_PATTERN,
    DocumentViewSet,
    KnowledgeBaseViewSet,
    SourceViewSet,
    TaskViewSet,
    VersionViewSet,
)

router = SimpleRouter(trailing_slash=False)
router.register("knowledge-bases", KnowledgeBaseViewSet, basename="knowledge-base")
router.register(f"knowledge-bases/(?P<kb_id>{ID_PATTERN})/documents", DocumentViewSet, basename="document")
router.register(
    f"knowledge-bases/(?P<kb_id>{ID_PATTERN})/documents/(?P<doc_id>{ID_PATTERN})/chunks", ChunkViewSet, basename="chunk"
)
router.register(f"knowledge-bases/(?P<kb_id>{ID_PATTERN})/versions", VersionViewSet, basename="version")
router.register(f"knowledge-bases/(?P<kb_id>{ID_PATTERN})/sources", SourceViewSet, basename="source")
router.register("tasks", TaskViewSet, basename="task")

urlpatterns = [
    re_path(rf"^documents/(?P<pk>{ID_PATTERN})/text$", DocumentTextView.as_view(), name="document-text"),
    *router.urls,
]
