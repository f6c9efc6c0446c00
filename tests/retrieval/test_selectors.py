"""The reads behind a search's hits."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from knowledge.models import ParentChunk
from retrieval import selectors
from tests.factories import ChunkFactory, DocumentFactory


def _shown(chunk) -> tuple:
    """Every field of a chunk and its document that a hit shows (``retrieval.services.hydrate``)."""
    return (
        chunk.pk, chunk.document_id, chunk.knowledge_base_id, chunk.kb_version_id, chunk.parent_id, chunk.content,
        chunk.doc_type, chunk.metadata, chunk.tags, chunk.ordinal, chunk.document.title, chunk.document.source_uri,
    )  # fmt: skip


def test_chunks_with_documents_reads_hits_and_documents_in_one_query_without_vectors(db):
    document = DocumentFactory(title="Manual", source_uri="docs/manual.txt")
    chunks = ChunkFactory.create_batch(3, document=document, metadata={"section": "Setup"}, tags=["setup"])
    other = ChunkFactory()  # another tenant's
    with CaptureQueriesContext(connection) as queries:
        found = selectors.chunks_with_documents(document.tenant, [c.pk for c in chunks] + [other.pk])
        shown = [_shown(chunk) for chunk in found.values()]
    assert sorted(found) == sorted(c.pk for c in chunks)  # another tenant's chunk is never read
    assert sorted(shown) == sorted(_shown(chunk) for chunk in chunks)  # what was written, no field left out
    assert len(queries.captured_queries) == 1  # a field the query left out would cost a query per hit
    sql = queries.captured_queries[0]["sql"]
    assert '"embedding"' not in sql and '"created_at"' not in sql


def test_chunks_with_documents_reads_parent_passages_in_the_same_query(db):
    document = DocumentFactory()
    parent = ParentChunk.objects.create(
        document=document, kb_version=document.knowledge_base.active_version, tenant=document.tenant,
        ordinal=0, content="the whole parent passage", content_hash="f" * 32, token_count=4,
    )  # fmt: skip
    child = ChunkFactory(document=document, parent=parent)
    with CaptureQueriesContext(connection) as queries:
        found = selectors.chunks_with_documents(document.tenant, [child.pk], parents=True)
        shown = _shown(found[child.pk]), found[child.pk].parent.content
    assert shown == (_shown(child), "the whole parent passage")
    assert len(queries.captured_queries) == 1
