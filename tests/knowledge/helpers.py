"""Small helpers the knowledge tests share: ingest paths, read back chunks and graph entities."""

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester, IngestReport
from knowledge.models import Document, GraphEntity, KnowledgeBase


def ingest(kb: KnowledgeBase, *paths) -> IngestReport:
    return Ingester(kb).ingest(discover_files(paths))


def chunk_texts(document: Document) -> list[str]:
    return list(document.chunks.order_by("ordinal").values_list("content", flat=True))


def graph_names(kb: KnowledgeBase) -> dict[str, int]:
    """Entity name -> passages mentioning it in the KB's active version."""
    return dict(GraphEntity.objects.filter(kb_version=kb.active_version).values_list("name", "chunk_count"))
