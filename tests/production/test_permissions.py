"""The leak matrix (``tests.retrieval.test_permissions``) on the production engines: the keyword leg on
a real Elasticsearch (the reader's check in its filter context) and the graph on a real Neo4j. The
same corpus, readers, hand-written visible sets and paths: every REST mode with the cache on and off,
plain and parent-child chunks, graph on and off, filters; Dify; the reads by id, MCP and the
OpenAI-compatible search; the console's retrieval testing."""

from __future__ import annotations

import pytest

from engines import get_lexical_index
from tests.retrieval import test_permissions as matrix

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def corpus(production_engines, embedder, tmp_path):
    corpus = matrix.build_corpus(tmp_path)
    for kb in corpus[1].values():
        kb.refresh_from_db()
        assert get_lexical_index().state(kb.active_version_id).acl  # Elasticsearch holds the ACL terms
    return corpus


@pytest.mark.parametrize("cache", ["cache on", "cache off"])
def test_the_leak_matrix_on_elasticsearch_and_neo4j(corpus, settings, cache):
    settings.SEARCH_CACHE_TTL_S = 300 if cache == "cache on" else 0
    assert matrix.leak_matrix(corpus) == 6 * 2 * 5 * 3 * 2


def test_the_keyword_index_filters_by_acl_itself_on_elasticsearch(corpus):
    matrix.test_the_keyword_index_filters_by_acl_itself(corpus)


def test_reads_by_id_mcp_and_openai_on_the_production_engines(corpus):
    matrix.test_reads_by_id_show_a_reader_only_what_it_may_read(corpus)


def test_dify_on_the_production_engines(corpus):
    matrix.test_dify_reads_as_its_keys_binding_and_meets_other_kbs_as_missing(corpus)


def test_console_retrieval_testing_on_the_production_engines(corpus, admin_client):
    matrix.test_console_retrieval_testing_reads_as_the_chosen_reader(corpus, admin_client)
