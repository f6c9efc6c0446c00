"""Hydration: the top 10 hits read back with their documents (``retrieval.selectors.chunks_with_documents``,
one round trip to the embedded PostgreSQL), as every search does before it answers."""

from __future__ import annotations

import pytest

from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory


@pytest.fixture
def hits(db):
    kb = KnowledgeBaseFactory()
    documents = [DocumentFactory(knowledge_base=kb) for _ in range(5)]
    chunks = [ChunkFactory(document=documents[n % 5]) for n in range(50)]
    return kb.tenant, [chunk.pk for chunk in chunks[::5]]


def test_chunks_with_documents(benchmark, hits):
    from retrieval.selectors import chunks_with_documents

    tenant, ids = hits
    assert len(benchmark(chunks_with_documents, tenant, ids)) == 10
