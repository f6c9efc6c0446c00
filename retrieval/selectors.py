"""Reads of the online path: a query in, ranked passages of the caller's tenant out."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

from knowledge.models import Chunk
from knowledge.selectors import searchable_knowledge_bases
from retrieval.embedders import EmbeddingError, get_embedder
from retrieval.engines.base import SearchScope, VectorHit, VectorIndex
from retrieval.exceptions import EmbedderUnavailable
from retrieval.filters import compile_filters
from tenants.models import Tenant


@dataclass
class SearchHit:
    chunk_id: int
    doc_id: int
    kb_id: int
    content: str
    score: float
    source: str
    rank: int
    title: str
    source_uri: str
    doc_type: str
    metadata: dict = field(default_factory=dict)


@lru_cache(maxsize=1)
def default_vector_index() -> VectorIndex:
    from retrieval.engines.pgvector_index import PgVectorIndex

    return PgVectorIndex()


def vector_search(
    *, tenant: Tenant, query: str, top_k: int, kb_ids: list[int] | None = None, filters: dict | None = None
) -> list[SearchHit]:
    """Dense search over the tenant's KBs; each KB is searched with the model that built it."""
    compiled = compile_filters(filters)
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for kb in searchable_knowledge_bases(tenant, kb_ids):
        version = kb.active_version
        groups[(version.embedding_model, version.embedding_dim)].append(version.pk)
    hits: list[VectorHit] = []
    for (model_name, dimension), version_ids in groups.items():
        try:
            query_vector = get_embedder(model_name).embed_query(query)
        except EmbeddingError as exc:
            raise EmbedderUnavailable(f"cannot embed the query: {exc}") from exc
        scope = SearchScope(tenant_id=tenant.pk, version_ids=tuple(version_ids), embedding_dim=dimension)
        hits.extend(default_vector_index().search(scope, query_vector, top_k, compiled))
    hits.sort(key=lambda hit: -hit.score)
    return _hydrate(tenant, hits[:top_k], source="vector")


def _hydrate(tenant: Tenant, hits: list[VectorHit], *, source: str) -> list[SearchHit]:
    chunks = Chunk.objects.filter(tenant=tenant, pk__in=[hit.chunk_id for hit in hits]).select_related("document")
    by_id = {chunk.pk: chunk for chunk in chunks}
    results = []
    for hit in hits:
        chunk = by_id.get(hit.chunk_id)
        if chunk is None:  # replaced by a concurrent re-ingest between the two reads
            continue
        results.append(
            SearchHit(
                chunk_id=chunk.pk,
                doc_id=chunk.document_id,
                kb_id=chunk.knowledge_base_id,
                content=chunk.content,
                score=round(hit.score, 6),
                source=source,
                rank=len(results) + 1,
                title=chunk.document.title,
                source_uri=chunk.document.source_uri,
                doc_type=chunk.doc_type,
                metadata={**chunk.metadata, "tags": chunk.tags, "ordinal": chunk.ordinal},
            )
        )
    return results
