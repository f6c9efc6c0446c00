"""Writes for knowledge bases (knowledge.knowledge_bases): their vector index, delete."""

import pytest
from django.db import connection, transaction

from engines import get_lexical_index
from knowledge.knowledge_bases import delete_knowledge_base, delete_tenant
from knowledge.models import (
    GraphEdge,
    GraphEntity,
    GraphMention,
    GraphPassageRelations,
    KnowledgeBase,
    KnowledgeBaseVersion,
)
from tests.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_vector_index_exists_per_dimension(kb):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'knowledge_chunk' AND indexname = %s",
            [f"chunk_embedding_hnsw_{kb.embedding_dim}"],
        )
        (definition,) = cursor.fetchone()
    assert "hnsw" in definition and f"halfvec({kb.embedding_dim})" in definition and "halfvec_cosine_ops" in definition


def test_a_kb_delete_rolled_back_keeps_its_lexical_index(kb, tmp_path, django_capture_on_commit_callbacks):
    (tmp_path / "a.txt").write_text("The garden hose reel mounts on any wall.")
    ingest(kb, tmp_path)
    kb_id, version_id = kb.pk, kb.active_version_id

    def delete_in_a_failing_change() -> None:
        with transaction.atomic():
            delete_knowledge_base(kb)
            raise RuntimeError("the surrounding change failed")

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(RuntimeError):
        delete_in_a_failing_change()
    assert callbacks == [] and KnowledgeBase.objects.filter(pk=kb_id).exists()
    assert get_lexical_index().state(version_id) is not None
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        delete_knowledge_base(KnowledgeBase.objects.get(pk=kb_id))
    assert len(callbacks) == 1 and get_lexical_index().state(version_id) is None


def test_deleting_a_kb_or_its_tenant_leaves_no_graph_rows(kb, tmp_path, django_capture_on_commit_callbacks):
    """The graph's edges and mentions have no database-checked keys: Django's deletion must take them."""
    (tmp_path / "lock.txt").write_text("The PortaLock Pro door lock PPR-9087 is made by Skyline Home in Shenzhen.")
    ingest(kb, tmp_path)
    other = KnowledgeBaseFactory(tenant=kb.tenant)
    ingest(other, tmp_path)
    graph_rows = (GraphEntity, GraphMention, GraphEdge, GraphPassageRelations)
    versions = {model: model.objects.filter(kb_version=kb.active_version) for model in graph_rows}
    assert all(rows.exists() for rows in versions.values())
    with django_capture_on_commit_callbacks(execute=True):
        delete_knowledge_base(kb)
    assert not any(rows.exists() for rows in versions.values())
    assert all(model.objects.filter(kb_version=other.active_version).exists() for model in graph_rows)
    with django_capture_on_commit_callbacks(execute=True):
        delete_tenant(other.tenant)
    assert not any(model.objects.filter(tenant=other.tenant_id).exists() for model in graph_rows)


def test_the_active_version_is_required_where_none_would_be_a_bug():
    kb = KnowledgeBaseFactory()
    assert kb.require_active_version() == kb.active_version

    KnowledgeBase.objects.filter(pk=kb.pk).update(active_version=None)
    with pytest.raises(KnowledgeBaseVersion.DoesNotExist, match=f"knowledge base {kb.pk} has no active version"):
        KnowledgeBase.objects.get(pk=kb.pk).require_active_version()
