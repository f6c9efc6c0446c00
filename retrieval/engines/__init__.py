"""The configured engines, built once per process: Elasticsearch when ``ELASTICSEARCH_URL`` is set,
else the embedded tantivy index."""
from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from retrieval.engines.base import LexicalIndex, VectorIndex


@lru_cache(maxsize=1)
def get_lexical_index() -> LexicalIndex:
    if settings.ELASTICSEARCH_URL:
        from retrieval.engines.elasticsearch_index import ElasticsearchLexicalIndex

        return ElasticsearchLexicalIndex(settings.ELASTICSEARCH_URL, prefix=settings.ELASTICSEARCH_INDEX_PREFIX)
    from retrieval.engines.tantivy_index import TantivyLexicalIndex

    return TantivyLexicalIndex(settings.LEXICAL_INDEX_DIR)


@lru_cache(maxsize=1)
def get_vector_index() -> VectorIndex:
    from retrieval.engines.pgvector_index import PgVectorIndex

    return PgVectorIndex()
