"""Errors of the knowledge domain a client can act on; ``core.errors`` maps them to HTTP."""
from __future__ import annotations

from rest_framework import status

from core.errors import DomainError


class KnowledgeBaseNotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "knowledge_base_not_found"
