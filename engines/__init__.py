"""The configured lexical engine, built once per process: Elasticsearch when ``ELASTICSEARCH_URL`` is
set, else the embedded tantivy index. (The vector index lives in the chunk table: ``knowledge.stores``.)"""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from engines.base import LexicalIndex


@lru_cache(maxsize=1)
def get_lexical_index() -> LexicalIndex:
    if settings.ELASTICSEARCH_URL:
        from engines.elasticsearch_index import ElasticsearchLexicalIndex

        return ElasticsearchLexicalIndex(
            settings.ELASTICSEARCH_URL,
            prefix=settings.ELASTICSEARCH_INDEX_PREFIX,
            search_deadline_s=settings.SEARCH_DEADLINE_MS / 1000,
        )
    from engines.tantivy_index import TantivyLexicalIndex

    return TantivyLexicalIndex(settings.LEXICAL_INDEX_DIR)
