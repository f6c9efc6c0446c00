"""Errors of the knowledge domain a client can act on; ``core.errors`` maps them to HTTP."""

from __future__ import annotations

from rest_framework import status

from core.errors import ConflictError, DomainError, NotFoundError


class KnowledgeBaseNotFound(NotFoundError):
    code = "knowledge_base_not_found"


class KnowledgeBaseExists(ConflictError):
    code = "knowledge_base_exists"


class InvalidEmbeddingModel(DomainError):
    code = "invalid_embedding_model"


class InvalidChunking(DomainError):
    """400: a chunking a KB or version cannot be built with (an unknown one, children larger than parents)."""

    code = "invalid_chunking"


class DocumentNotFound(NotFoundError):
    code = "document_not_found"


class TaskNotFound(NotFoundError):
    code = "task_not_found"


class UploadTooLarge(DomainError):
    """413 with the code a too-large search body gets; the upload limits are their own settings."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    code = "payload_too_large"


class VersionNotFound(NotFoundError):
    code = "version_not_found"


class VersionConflict(ConflictError):
    """409: a version is still building, or this one cannot be activated (building or failed)."""

    code = "version_conflict"


class VocabularyChanged(ConflictError):
    """409: a concurrent import added some of the planned terms first; a new preview shows them."""

    code = "vocabulary_changed"


class SourceNotFound(NotFoundError):
    code = "source_not_found"


class InvalidSourcePath(DomainError):
    """400: a folder source outside ``KNOWLEDGE_SOURCE_ROOTS``, through ``..``, out of them through a
    symlink, not a folder, or overlapping another tenant's source; ``details.rule`` names which."""

    code = "invalid_source_path"


class ChunkNotFound(NotFoundError):
    code = "chunk_not_found"


class InvalidChunkEdit(DomainError):
    """400: an edit that leaves a chunk without text, or changes nothing."""

    code = "invalid_chunk_edit"
