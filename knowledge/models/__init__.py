"""The knowledge app's models, one module per concern; imported from here (``knowledge.models``), where
Django and the migrations find them."""

from knowledge.models.content import (
    CHUNKINGS,
    PARENT_CHILD,
    PLAIN,
    Chunk,
    Document,
    KnowledgeBase,
    KnowledgeBaseVersion,
    KnowledgeTask,
    ParentChunk,
    PendingLexicalChange,
    current_graph_extractor,
    originals_storage,
)
from knowledge.models.curation import ChunkEdit
from knowledge.models.graph import (
    GraphCommunity,
    GraphEdge,
    GraphEntity,
    GraphEntityRule,
    GraphMention,
    GraphPassageRelations,
)
from knowledge.models.sources import KnowledgeSource, SourceRun
from knowledge.models.vocabulary import DictionaryTerm, Synonym

__all__ = [
    "CHUNKINGS",
    "PARENT_CHILD",
    "PLAIN",
    "Chunk",
    "ChunkEdit",
    "DictionaryTerm",
    "Document",
    "GraphCommunity",
    "GraphEdge",
    "GraphEntity",
    "GraphEntityRule",
    "GraphMention",
    "GraphPassageRelations",
    "KnowledgeBase",
    "KnowledgeBaseVersion",
    "KnowledgeSource",
    "KnowledgeTask",
    "ParentChunk",
    "PendingLexicalChange",
    "SourceRun",
    "Synonym",
    "current_graph_extractor",
    "originals_storage",
]
