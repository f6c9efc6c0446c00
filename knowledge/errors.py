"""Errors of the knowledge domain a client can act on; ``core.errors`` maps them to HTTP."""
from __future__ import annotations

from rest_framework import status

from core.errors import DomainError


class KnowledgeBaseNotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "knowledge_base_not_found"


class KnowledgeBaseExists(DomainError):
    status_code = status.HTTP_409_CONFLICT
    code = "knowledge_base_exists"


class InvalidEmbeddingModel(DomainError):
    code = "invalid_embedding_model"


class DocumentNotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "document_not_found"


class TaskNotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "task_not_found"


class UploadTooLarge(DomainError):
    """413 with the code a too-large search body gets; the upload limits are their own settings."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "payload_too_large"


class VersionNotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "version_not_found"


class VersionConflict(DomainError):
    """409: a version is still building, or this one cannot be activated (building or failed)."""

    status_code = status.HTTP_409_CONFLICT
    code = "version_conflict"


class SourceNotFound(DomainError):
    status_code = status.HTTP_404_NOT_FOUND
    code = "source_not_found"


class InvalidSourcePath(DomainError):
    """400: a folder source outside ``KNOWLEDGE_SOURCE_ROOTS``, through ``..``, out of them through a
    symlink, not a folder, or overlapping another tenant's source; ``details.rule`` names which."""

    code = "invalid_source_path"
