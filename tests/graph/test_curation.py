"""A curator's merge, rename and delete of a graph entity: applied at once, kept through a forced
re-ingestion, a graph rebuild and a new version's build, and confined to its own knowledge base."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db.models import Q

from graph.build import rebuild_graph
from graph.curation import delete_entity, merge_entity, rename_entity
from graph.ranking import rank_by_graph
from knowledge.errors import VersionConflict
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import GraphEdge, GraphEntity, GraphEntityRule
from knowledge.versions import fill_version, start_version_build, version_build_files
from tests.factories import TenantFactory
from tests.knowledge.helpers import graph_names

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

FILES = {
    "lock.txt": "The PortaLock Pro door lock PPR-9087 is made by Skyline Home in Shenzhen.",
    "recall.txt": "In 2025 Skyline Homes recalled the AirSense monitor SKY-30452 over a faulty fan.",
}


@pytest.fixture
def folder(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def new_kb(folder, tenant=None, name="curated"):
    kb = create_knowledge_base(tenant=tenant or TenantFactory(), name=name, chunk_size=120, chunk_overlap=0)
    Ingester(kb, keep_originals=True).ingest(discover_files([folder]))
    return kb


@pytest.fixture
def kb(folder, embedder):
    return new_kb(folder)


def entity(kb, name: str) -> GraphEntity:
    return GraphEntity.objects.get(kb_version=kb.active_version, name=name)


def reingest(kb, folder) -> None:
    """Every file again, forced: re-chunked and re-extracted although unchanged."""
    Ingester(kb).ingest([replace(source, force=True) for source in discover_files([folder])])


def neighbours(item: GraphEntity) -> dict[str, str]:
    """neighbour name -> relation kind, as the edges store them"""
    edges = GraphEdge.objects.filter(Q(source=item) | Q(target=item)).select_related("source", "target")
    return {(edge.target if edge.source_id == item.pk else edge.source).name: edge.kind for edge in edges}


def test_a_merge_moves_passages_and_relations_and_holds_through_reingestion(kb, folder):
    misspelt, right = entity(kb, "skyline homes"), entity(kb, "skyline home")
    assert "sky-30452" in neighbours(misspelt) and "sky-30452" not in neighbours(right)
    merge_entity(misspelt, right)
    names = graph_names(kb)
    assert "skyline homes" not in names and names["skyline home"] == 2
    merged = entity(kb, "skyline home")
    assert neighbours(merged)["sky-30452"] == "" and neighbours(merged)["ppr-9087"] == "made_by"
    ranking = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "Skyline Homes", hops=0)
    assert len(ranking.hits) == 2  # the merged name finds the entity it went into
    reingest(kb, folder)
    assert "skyline homes" not in graph_names(kb) and graph_names(kb)["skyline home"] == 2


def test_a_rename_changes_the_label_and_name_and_holds_through_a_rebuild_and_a_new_version(
    kb, folder, django_capture_on_commit_callbacks
):
    rename_entity(entity(kb, "skyline home"), "Skyline Home Ltd")
    renamed = entity(kb, "skyline home ltd")
    assert renamed.label == "Skyline Home Ltd" and "skyline home" not in graph_names(kb)
    assert neighbours(renamed)["ppr-9087"] == "made_by"  # its relations went with it
    hits = rank_by_graph(kb.tenant_id, (kb.active_version_id,), "Skyline Home", hops=0).hits
    assert len(hits) == 1  # the old name still finds it
    rebuild_graph(kb.active_version)
    assert entity(kb, "skyline home ltd").label == "Skyline Home Ltd"
    with django_capture_on_commit_callbacks(execute=False):  # built in-process below, not by a worker
        version, _ = start_version_build(kb, activate=False)
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    built = GraphEntity.objects.filter(kb_version=version)
    assert built.get(name="skyline home ltd").label == "Skyline Home Ltd"
    assert not built.filter(name="skyline home").exists()


def test_a_deleted_entity_stays_out_of_every_later_extraction(kb, folder):
    lock = entity(kb, "portalock pro")
    delete_entity(lock)
    assert lock.name not in graph_names(kb)
    assert not GraphEdge.objects.filter(Q(source_id=lock.pk) | Q(target_id=lock.pk)).exists()
    reingest(kb, folder)
    assert lock.name not in graph_names(kb)
    rebuild_graph(kb.active_version)
    assert lock.name not in graph_names(kb)
    assert GraphEntityRule.objects.get(knowledge_base=kb, name=lock.name).action == "delete"


def test_edits_chain_and_a_later_edit_of_a_name_replaces_its_rule(kb):
    merge_entity(entity(kb, "skyline homes"), entity(kb, "skyline home"))
    rename_entity(entity(kb, "skyline home"), "Skyline")
    assert graph_names(kb)["skyline"] == 2  # the merged name follows the rename
    delete_entity(entity(kb, "skyline"))
    assert not {"skyline", "skyline home", "skyline homes"} & graph_names(kb).keys()
    assert GraphEntityRule.objects.filter(knowledge_base=kb).count() == 3


def test_a_merge_into_itself_or_its_own_merged_name_is_refused(kb):
    right = entity(kb, "skyline home")
    with pytest.raises(VersionConflict):
        merge_entity(right, right)
    merge_entity(entity(kb, "skyline homes"), right)
    assert not GraphEntityRule.objects.filter(knowledge_base=kb, name="skyline home").exists()


def test_edits_stay_in_their_knowledge_base_and_tenant(kb, folder):
    same_tenant = new_kb(folder, tenant=kb.tenant, name="another")
    other_tenant = new_kb(folder)
    delete_entity(entity(kb, "skyline home"))
    assert "skyline home" not in graph_names(kb)
    assert "skyline home" in graph_names(same_tenant) and "skyline home" in graph_names(other_tenant)
    reingest(same_tenant, folder)
    assert "skyline home" in graph_names(same_tenant)
    with pytest.raises(VersionConflict):  # into another tenant's (or KB's) entity
        merge_entity(entity(kb, "skyline homes"), entity(other_tenant, "skyline home"))
    with pytest.raises(VersionConflict):
        merge_entity(entity(kb, "skyline homes"), entity(same_tenant, "skyline home"))


def test_curating_is_refused_while_the_llm_types_relations(kb, settings):
    settings.GRAPH_LLM_TRIPLES, settings.LLM_URL = True, "http://127.0.0.1:9/v1"
    with pytest.raises(VersionConflict, match="GRAPH_LLM_TRIPLES"):
        delete_entity(entity(kb, "skyline home"))
    assert not GraphEntityRule.objects.exists()
