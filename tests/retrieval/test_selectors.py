"""The reads behind a search's hits."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from retrieval import selectors
from tests.factories import ChunkFactory, DocumentFactory


def test_chunks_with_documents_reads_hits_and_documents_in_one_query_without_vectors(db):
    document = DocumentFactory()
    chunks = ChunkFactory.create_batch(3, document=document)
    other = ChunkFactory()  # another tenant's
    with CaptureQueriesContext(connection) as queries:
        found = selectors.chunks_with_documents(document.tenant, [c.pk for c in chunks] + [other.pk])
        shown = [(c.content, c.document.title, c.metadata, c.tags, c.ordinal) for c in found.values()]
    assert sorted(found) == sorted(c.pk for c in chunks)  # another tenant's chunk is never read
    assert len(shown) == 3 and len(queries.captured_queries) == 1
    assert '"embedding"' not in queries.captured_queries[0]["sql"]
