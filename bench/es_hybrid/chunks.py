"""A KB version's chunks as Elasticsearch's hybrid index holds them: each row's text analyzed exactly as
``knowledge.lexical`` analyzes it for the service's keyword index, and the vector the row stores (no
embedding again: both sides search the same vectors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bench.es_hybrid.es import Entry


def version_entries(version: Any) -> Iterator[Entry]:
    from knowledge.chunking import contextual_text
    from knowledge.models import Chunk
    from knowledge.selectors.search import analyzer_for_tenant

    tenant_id = version.knowledge_base.tenant_id
    analyzer = analyzer_for_tenant(tenant_id)
    rows = (
        Chunk.objects.filter(kb_version=version, tenant_id=tenant_id)
        .values_list("id", "document__context", "content", "metadata", "embedding")
        .iterator(chunk_size=2000)
    )
    for chunk_id, context, content, metadata, embedding in rows:
        text = analyzer.analyze(contextual_text(context, content, (metadata or {}).get("section")))
        yield Entry(chunk_id, text, embedding)


def source_uris(version: Any) -> dict[int, str]:
    """Chunk id -> its document's ``source_uri`` (the evaluation's corpus id)."""
    from knowledge.models import Chunk

    rows = Chunk.objects.filter(kb_version=version).values_list("id", "document__source_uri")
    return dict(rows.iterator(chunk_size=5000))
