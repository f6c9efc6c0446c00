"""The registry picks each store's implementation from settings, the last entry of each list being the
default, and builds each store once per process."""

from __future__ import annotations

from engines import registry
from engines.registry import GRAPH_STORES, LEXICAL_INDEXES, VECTOR_INDEXES, chosen


def test_the_defaults_are_pgvector_tantivy_and_the_postgres_graph(settings):
    settings.ELASTICSEARCH_URL, settings.NEO4J_URL = "", ""
    assert [chosen(backends).name for backends in (VECTOR_INDEXES, LEXICAL_INDEXES, GRAPH_STORES)] == [
        "pgvector", "tantivy", "postgres",
    ]  # fmt: skip


def test_a_server_url_picks_its_backend(settings):
    settings.ELASTICSEARCH_URL, settings.NEO4J_URL = "http://127.0.0.1:9200", "neo4j://127.0.0.1:7687"
    assert (chosen(LEXICAL_INDEXES).name, chosen(GRAPH_STORES).name) == ("elasticsearch", "neo4j")


def test_each_store_is_built_once_until_cleared(settings, tmp_path):
    settings.ELASTICSEARCH_URL, settings.LEXICAL_INDEX_DIR = "", tmp_path
    registry.clear()
    try:
        first = registry.lexical_index()
        assert first is registry.lexical_index() and first.name == "tantivy"
        registry.clear()
        assert registry.lexical_index() is not first
    finally:
        registry.clear()  # the next test builds its stores on its own settings
