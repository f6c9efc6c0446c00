"""Versions (knowledge.versions): build, validate, activate, retire, purge."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from knowledge.errors import VersionConflict
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import update_search_settings
from knowledge.models import PARENT_CHILD, PLAIN, Chunk, Document, KnowledgeBaseVersion, ParentChunk
from knowledge.versions import (
    VERSION_SETTINGS,
    activate_version,
    fill_version,
    purge_old_versions,
    retire_version,
    start_version_build,
    version_build_files,
)
from retrieval.services.search import search
from retrieval.types import SearchRequest
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_a_new_version_keeps_the_measured_search_settings_while_the_model_stays(
    kb, remote_model, django_capture_on_commit_callbacks
):
    measured = update_search_settings(kb, {"rrf_k": 20, "weights": {"vector": 0.5}}, version=kb.active_version)
    with django_capture_on_commit_callbacks(execute=False):  # the build tasks are recorded, never sent
        same_model, _ = start_version_build(kb, activate=False, chunk_size=64)
    assert same_model.search_settings == measured
    same_model.status = same_model.Status.FAILED  # one version builds at a time
    same_model.save(update_fields=["status"])
    with django_capture_on_commit_callbacks(execute=False):
        other_model, _ = start_version_build(kb, activate=False, embedding_model="remote:minilm")
    assert other_model.search_settings == {}  # measured on another model's vectors: not carried over
    with pytest.raises(ValueError, match="is not a version of knowledge base"):
        update_search_settings(KnowledgeBaseFactory(tenant=kb.tenant), {}, version=other_model)


def test_a_new_model_answers_searches_only_after_the_switch(
    kb, tmp_path, remote_model, embedding_server, django_capture_on_commit_callbacks
):
    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    with django_capture_on_commit_callbacks(execute=False):  # built in-process below, not by a worker
        version, _ = start_version_build(kb, activate=False, embedding_model="remote:minilm")
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    assert version.status == version.Status.READY

    def vector_search() -> list[int]:
        embedding_server.requests.clear()
        request = SearchRequest(mode="vector", query="door thickness for the lock", top_k=5, kb_ids=[kb.pk])
        return [hit.chunk_id for hit in search(kb.tenant, request).results]

    before = vector_search()
    assert embedding_server.requests == []  # the active version's local model embeds the query
    assert set(before) <= set(Chunk.objects.filter(kb_version=kb.active_version).values_list("id", flat=True))
    activate_version(version)
    after = vector_search()
    assert [r.json()["input"] for r in embedding_server.requests] == [["door thickness for the lock"]]
    assert after and set(after) <= set(Chunk.objects.filter(kb_version=version).values_list("id", flat=True))


def test_a_new_version_must_answer_the_tenants_recent_queries(
    kb, tmp_path, remote_model, embedding_server, django_capture_on_commit_callbacks
):
    from core.usage import ServedQuery, count_query

    (tmp_path / "lock.txt").write_text("The PPR-9087 lock fits doors 35 to 80 mm thick.")
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    for query in ("door thickness", "PPR-9087 lock", "door thickness"):
        count_query(kb.tenant_id, ServedQuery(mode="hybrid", cached=False, latency_ms=5.0, query=query, hits=1))
    embedding_server.failing_inputs = {"door thickness"}  # the new model cannot embed one of them
    with django_capture_on_commit_callbacks(execute=False):  # built in-process below, not by a worker
        version, _ = start_version_build(kb, activate=False, embedding_model="remote:minilm")
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    assert version.status == version.Status.FAILED
    assert "recent query 'door thickness' failed" in version.error and "EmbeddingError" in version.error
    asked = [request.json()["input"] for request in embedding_server.requests]
    assert ["door thickness"] in asked  # the most frequent query is tried first

    embedding_server.failing_inputs = set()
    with django_capture_on_commit_callbacks(execute=False):
        version, _ = start_version_build(kb, activate=False, embedding_model="remote:minilm")
    embedding_server.requests.clear()
    fill_version(version, version_build_files(version), on_progress=lambda done: None)
    assert (version.status, version.error) == (version.Status.READY, "")
    asked = [request.json()["input"] for request in embedding_server.requests]
    assert ["door thickness"] in asked and ["ppr-9087 lock"] in asked  # both queries, as counted


def test_versions_retired_or_failed_past_the_retention_are_purged(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    document = DocumentFactory(knowledge_base=kb)
    first = kb.active_version
    ChunkFactory(document=document)
    settings_of = {"embedding_model": first.embedding_model, "embedding_dim": first.embedding_dim,
                   "chunk_size": first.chunk_size, "chunk_overlap": first.chunk_overlap}  # fmt: skip
    second = KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=2, status="ready", **settings_of)
    ChunkFactory(document=document, kb_version=second)
    activate_version(second)
    long_ago = timezone.now() - timedelta(days=8)
    failed = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb, number=3, status="failed", finished_at=long_ago, **settings_of
    )
    recent = KnowledgeBaseVersion.objects.create(
        knowledge_base=kb, number=4, status="retired", retired_at=timezone.now(), **settings_of
    )
    assert purge_old_versions(retention_days=7) == 1  # the failed one; version 1 was retired just now
    assert not KnowledgeBaseVersion.objects.filter(pk=failed.pk).exists()
    assert Chunk.objects.filter(kb_version_id=first.pk).exists()
    KnowledgeBaseVersion.objects.filter(pk=first.pk).update(retired_at=long_ago)

    assert purge_old_versions(retention_days=7) == 1
    remaining = set(KnowledgeBaseVersion.objects.filter(knowledge_base=kb).values_list("pk", flat=True))
    assert remaining == {second.pk, recent.pk}
    assert not Chunk.objects.filter(kb_version_id=first.pk).exists()
    assert Chunk.objects.filter(kb_version=second).count() == 1


def test_a_switch_sets_each_documents_chunk_count_to_the_new_versions_and_rewrites_only_those_that_change(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    first = kb.active_version
    same, grows, absent = (DocumentFactory(knowledge_base=kb) for _ in range(3))
    settings_of = {name: getattr(first, name) for name in VERSION_SETTINGS}
    second = KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=2, status="ready", **settings_of)
    held = {  # chunks of each document in each version
        (same, first): 2, (same, second): 2, (grows, first): 1, (grows, second): 3, (absent, first): 2,
    }  # fmt: skip
    for (document, version), count in held.items():
        ChunkFactory.create_batch(count, document=document, kb_version=version)
    Document.objects.filter(knowledge_base=kb).update(chunk_count=2)  # as ingestion into version 1 left them
    Document.objects.filter(pk=grows.pk).update(chunk_count=1)

    def counts_and_row_versions() -> dict[int, tuple[int, str]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, chunk_count, xmin::text FROM knowledge_document WHERE knowledge_base_id = %s", [kb.pk]
            )
            return {pk: (count, xmin) for pk, count, xmin in cursor.fetchall()}

    before = counts_and_row_versions()
    activate_version(second)
    after = counts_and_row_versions()
    assert {pk: count for pk, (count, _) in after.items()} == {same.pk: 2, grows.pk: 3, absent.pk: 0}
    assert after[same.pk][1] == before[same.pk][1]  # an unchanged count is not rewritten
    activate_version(first)  # the rollback restores them
    assert {pk: count for pk, (count, _) in counts_and_row_versions().items()} == {
        same.pk: 2,
        grows.pk: 1,
        absent.pk: 2,
    }


def test_a_ready_version_is_retired_and_can_still_be_activated(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    first = kb.active_version
    settings_of = {name: getattr(first, name) for name in VERSION_SETTINGS}
    ready = KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=2, status="ready", **settings_of)
    building = KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=3, **settings_of)
    retired = retire_version(ready)
    assert retired.status == "retired" and retired.retired_at is not None
    assert retire_version(retired).retired_at == retired.retired_at  # again: nothing changes
    for version, says in ((first, "is active: .* activate another version instead"), (building, "building")):
        with pytest.raises(VersionConflict, match=says):
            retire_version(version)
        version.refresh_from_db()
        assert version.status in ("active", "building")
    activate_version(retired)
    kb.refresh_from_db()
    assert kb.active_version_id == ready.pk


def test_a_rebuild_switches_a_kb_to_parent_child_chunks_and_back(
    kb, tmp_path, settings, django_capture_on_commit_callbacks
):
    paragraphs = [
        (
            "The SKY-4410 hub pairs over Zigbee: hold its pairing button for five seconds until the ring blinks blue. "
            "The app then lists it under new devices; choose it and enter the code printed under the hub."
        ),
        (
            "Store the lithium battery pack between 10 and 25 degrees Celsius, away from direct sunlight. "
            "A pack kept for months should be charged to half its capacity and checked every quarter."
        ),
    ]
    (tmp_path / "manual.txt").write_text("\n\n".join(paragraphs))
    Ingester(kb, keep_originals=True).ingest(discover_files([tmp_path]))
    query = SearchRequest(query="Zigbee pairing button", mode="hybrid", top_k=3, kb_ids=[kb.pk])

    def build(**options) -> KnowledgeBaseVersion:
        with django_capture_on_commit_callbacks(execute=False):  # built in-process below, not by a worker
            version, _ = start_version_build(kb, activate=False, **options)
        fill_version(version, version_build_files(version), on_progress=lambda done: None)
        assert version.status == version.Status.READY, version.error
        return activate_version(version)

    plain = kb.active_version
    children = build(chunking=PARENT_CHILD, chunk_size=24, parent_chunk_size=64)
    assert (children.chunking, children.chunk_size, children.parent_chunk_size) == (PARENT_CHILD, 24, 64)
    kb.refresh_from_db()
    assert (kb.chunking, kb.parent_chunk_size) == (PARENT_CHILD, 64)
    assert (
        list(ParentChunk.objects.filter(kb_version=children).order_by("ordinal").values_list("content", flat=True))
        == paragraphs
    )
    assert not Chunk.objects.filter(kb_version=children, parent__isnull=True).exists()
    assert not Chunk.objects.filter(kb_version=plain, parent__isnull=False).exists()  # the old version is untouched
    hit = search(kb.tenant, query).results[0]
    assert hit.content == paragraphs[0] and hit.parent_id is not None and hit.children

    kb.refresh_from_db()
    back = build(chunking=PLAIN)  # the plain chunking's default size, not the children's
    assert (back.chunking, back.chunk_size, back.parent_chunk_size) == (PLAIN, settings.CHUNK_SIZE_TOKENS, None)
    assert not ParentChunk.objects.filter(kb_version=back).exists()
    hit = search(kb.tenant, query).results[0]
    assert hit.parent_id is None and hit.children is None and "Zigbee" in hit.content
