"""The whole knowledge lifecycle on the production engines (Elasticsearch for the keyword leg, Neo4j
for the graph), as ``docker-compose.yml`` deploys it: ingest, search every mode, build a new version
and switch to it (its own index behind its own alias), roll back, delete a document, sync a folder
source that changed. After each step the keyword index holds exactly the rows (``check_kb``), the graph
holds exactly the live passages' entities, and searches answer from the active version only."""

from __future__ import annotations

import pytest

from engines import get_lexical_index
from engines.base import GraphScope
from knowledge.documents import delete_document
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.lexical import check_version
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseVersion
from knowledge.sources import create_source, sync
from knowledge.stores import graph_store
from knowledge.versions import activate_version, fill_version, start_version_build, version_build_files
from retrieval.services.search import search
from retrieval.types import SearchRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LOCK = "# PPR-9087 lock\n\nThe PPR-9087 smart lock from Skyline Home fits doors 35 to 80 mm thick."
KETTLE = "The KT-2210 kettle from Skyline Home boils 1.7 litres of water in four minutes."
KETTLE_NEW = "The KT-2210 kettle from Skyline Home now boils 1.8 litres in three minutes, says Mr. Zhang."


def rows(version: KnowledgeBaseVersion) -> set[int]:
    return set(Chunk.objects.filter(kb_version=version).values_list("id", flat=True))


def assert_engines_hold_the_rows(version: KnowledgeBaseVersion) -> None:
    """Keyword index equal to the rows; the graph's passages are the version's passages."""
    assert sorted(get_lexical_index().chunk_ids(version.pk)) == sorted(rows(version))
    check = check_version(version)
    assert not check.index_drift and not check.row_drift, check
    scope = GraphScope(version.knowledge_base.tenant_id, (version.pk,))
    assert graph_store().chunk_total(scope) == len(rows(version))


def hits(kb: KnowledgeBase, query: str, mode: str, **options) -> list[int]:
    request = SearchRequest(query=query, mode=mode, top_k=10, kb_ids=[kb.pk], **options)
    response = search(kb.tenant, request)
    assert response.degraded == [], response.degraded
    return [hit.chunk_id for hit in response.results]


@pytest.fixture
def kb(tenant, embedder, production_engines, tmp_path):
    kb = create_knowledge_base(tenant=tenant, name="handbook", chunk_size=120, chunk_overlap=16)
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "lock.md").write_text(LOCK)
    (folder / "kettle.txt").write_text(KETTLE)
    Ingester(kb, keep_originals=True).ingest(discover_files([folder]))
    kb.refresh_from_db()
    return kb


def test_ingested_documents_are_searched_on_elasticsearch_and_neo4j(kb):
    version = kb.active_version
    assert_engines_hold_the_rows(version)
    lock = set(Chunk.objects.filter(kb_version=version, document__title__icontains="lock").values_list("id", flat=True))
    assert hits(kb, "PPR-9087", "bm25")[0] in lock
    assert hits(kb, "how thick may the door be for the smart lock", "hybrid")[0] in lock
    assert set(hits(kb, "ppr-9087", "graph")) & lock
    # Both passages name Skyline Home: the graph relates them through it.
    scope = GraphScope(kb.tenant_id, (version.pk,))
    (skyline,) = graph_store().find_entities(scope, ["skyline home"])
    assert {chunk for _, chunk, _ in graph_store().mentions(scope, [skyline.entity_id], per_entity=10)} == rows(version)


def test_a_new_version_switches_and_rolls_back_on_the_production_engines(kb, django_capture_on_commit_callbacks):
    old = kb.active_version
    with django_capture_on_commit_callbacks(execute=False):  # built here, not by a worker
        new, _ = start_version_build(kb, activate=False, chunk_size=64)
    fill_version(new, version_build_files(new), on_progress=lambda done: None)
    assert new.status == new.Status.READY, new.error
    assert_engines_hold_the_rows(new)
    assert_engines_hold_the_rows(old)  # blue-green: the active version's index is untouched
    assert set(hits(kb, "PPR-9087", "bm25")) <= rows(old)

    activate_version(new)
    kb.refresh_from_db()
    assert set(hits(kb, "PPR-9087", "bm25")) <= rows(new) and hits(kb, "PPR-9087", "bm25")
    assert set(hits(kb, "ppr-9087", "graph")) <= rows(new)

    old.refresh_from_db()
    activate_version(old)  # the rollback: instant, nothing rebuilt
    kb.refresh_from_db()
    assert set(hits(kb, "PPR-9087", "bm25")) <= rows(old) and hits(kb, "PPR-9087", "bm25")
    assert_engines_hold_the_rows(old)


def test_a_deleted_document_leaves_both_engines(kb):
    version = kb.active_version
    lock = Document.objects.get(knowledge_base=kb, title__icontains="lock")
    lock_chunks = set(Chunk.objects.filter(document=lock).values_list("id", flat=True))
    delete_document(lock)
    assert not set(get_lexical_index().chunk_ids(version.pk)) & lock_chunks
    assert not set(hits(kb, "PPR-9087 lock", "bm25")) & lock_chunks
    assert graph_store().find_entities(GraphScope(kb.tenant_id, (version.pk,)), ["ppr-9087"]) == []
    assert_engines_hold_the_rows(version)


def test_a_folder_source_sync_updates_both_engines(tenant, embedder, production_engines, settings, tmp_path):
    root = tmp_path / "sources"
    (root / "handbook").mkdir(parents=True)
    (root / "handbook" / "kettle.txt").write_text(KETTLE)
    settings.KNOWLEDGE_SOURCE_ROOTS = [str(root)]
    kb = create_knowledge_base(tenant=tenant, name="synced")
    source = create_source(kb, kind="folder", path=str(root / "handbook"), interval_seconds=3600)
    sync(source, trigger="test", start_progress=lambda total: lambda done: None)
    kb.refresh_from_db()
    assert hits(kb, "1.7 litres", "bm25")
    (root / "handbook" / "kettle.txt").write_text(KETTLE_NEW)  # the hot update
    sync(source, trigger="test", start_progress=lambda total: lambda done: None)
    assert hits(kb, "1.8 litres three minutes", "bm25")
    assert set(hits(kb, "1.7 litres", "bm25")) <= rows(kb.active_version)
    assert_engines_hold_the_rows(kb.active_version)
