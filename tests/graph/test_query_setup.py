"""What the graph leg applies to a query (``graph_query_setup``, ``graph_setup_of``): cached per stamp,
and every edit that changes it (a synonym group, a curator's edit, another extractor) reaches the next
search."""

from __future__ import annotations

import pytest

from graph.curation import merge_entity
from graph.query_setup import graph_query_setup, graph_setup_of
from graph.ranking import rank_by_graph
from knowledge.models import GraphEntity, KnowledgeBaseVersion, Synonym
from knowledge.selectors.search import searched_knowledge
from tests.factories import TenantFactory
from tests.graph.test_curation import FILES, new_kb

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def kb(tmp_path, embedder):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return new_kb(tmp_path)


def revision(kb) -> int:
    return KnowledgeBaseVersion.objects.get(pk=kb.active_version_id).revision


def search_setup(kb):
    """The setup as a search builds it, from what it read of the tenant's knowledge."""
    return graph_setup_of(kb.tenant_id, searched_knowledge(kb.tenant))


def skyline_homes_hits(kb, setup=None) -> int:
    return len(rank_by_graph(kb.tenant_id, (kb.active_version_id,), "Skyline Homes", hops=0, setup=setup).hits)


def test_a_search_builds_the_same_setup_as_a_read_of_its_versions_and_once_per_stamp(kb):
    read = graph_query_setup(kb.tenant_id, [kb.active_version_id])
    built = search_setup(kb)
    assert built.extractor is read.extractor and built.curation is read.curation  # one per stamp and process
    assert built.other_extractors == read.other_extractors == {}


def test_a_curators_edit_reaches_the_next_search_and_expires_cached_answers(kb):
    assert skyline_homes_hits(kb, search_setup(kb)) == 1  # recall.txt alone names "Skyline Homes"
    before = revision(kb)
    misspelt = GraphEntity.objects.get(kb_version=kb.active_version, name="skyline homes")
    merge_entity(misspelt, GraphEntity.objects.get(kb_version=kb.active_version, name="skyline home"))
    assert revision(kb) > before  # the cache key of every answer of the version moved on
    assert skyline_homes_hits(kb, search_setup(kb)) == 2  # the merged name finds the entity it went into
    assert skyline_homes_hits(kb) == 2


def test_a_synonym_group_reaches_the_next_search(kb):
    assert skyline_homes_hits(kb) == 1
    Synonym.objects.create(tenant=kb.tenant, kind=Synonym.Kind.EQUIVALENT, terms=["Skyline Home", "Skyline Homes"])
    setup = search_setup(kb)
    assert setup.extractor.query_names("Skyline Homes")[0] == "skyline home"
    assert skyline_homes_hits(kb, setup) == 1  # the passages of the entity the alias names (lock.txt)
    assert rank_by_graph(kb.tenant_id, (kb.active_version_id,), "Skyline Homes", hops=0).hits == (
        rank_by_graph(kb.tenant_id, (kb.active_version_id,), "Skyline Home", hops=0).hits
    )


def test_a_graph_another_extractor_built_is_named_and_another_tenants_versions_are_not_read(kb):
    KnowledgeBaseVersion.objects.filter(pk=kb.active_version_id).update(graph_extractor="2")
    assert search_setup(kb).other_extractors == {kb.active_version_id: "2"}
    assert graph_query_setup(kb.tenant_id, [kb.active_version_id]).other_extractors == {kb.active_version_id: "2"}
    assert graph_query_setup(TenantFactory().pk, [kb.active_version_id]).other_extractors == {}
