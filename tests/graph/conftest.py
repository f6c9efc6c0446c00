import pytest

from knowledge.knowledge_bases import create_knowledge_base


@pytest.fixture
def kb(tenant, embedder):
    """A KB with small chunks (several per file), on the shared embedding model."""
    return create_knowledge_base(tenant=tenant, name="docs", chunk_size=120, chunk_overlap=16)
