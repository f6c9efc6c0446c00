"""The console's graph browsers: an entity's passages and neighbours (its own tenant's only), and a
community's summary and supporting passages."""

import pytest
from django.db.models import Q
from django.utils.html import escape

from knowledge.knowledge_bases import create_knowledge_base
from tests.factories import TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_the_entity_browser_finds_an_entity_and_shows_its_passages_and_neighbours(admin_client, sample_kb):
    from knowledge.models import GraphEdge, GraphEntity

    listing = admin_client.get("/admin/knowledge/graphentity/", {"q": "ppr-9087"})
    assert listing.status_code == 200 and "PPR-9087" in listing.content.decode()
    entity = GraphEntity.objects.get(kb_version=sample_kb.active_version, name="ppr-9087")
    page = admin_client.get(f"/admin/knowledge/graphentity/{entity.pk}/change/").content.decode()
    strongest = GraphEdge.objects.filter(Q(source=entity) | Q(target=entity)).order_by("-weight").first()
    neighbour = strongest.target_id if strongest.source_id == entity.pk else strongest.source_id
    assert f"/admin/knowledge/graphentity/{neighbour}/change/" in page
    mention = entity.mentions.select_related("chunk").first()
    assert f"/admin/knowledge/chunk/{mention.chunk_id}/change/" in page
    assert admin_client.post(f"/admin/knowledge/graphentity/{entity.pk}/delete/").status_code == 403  # read-only


def test_an_entitys_page_shows_nothing_of_another_tenant(admin_client, sample_kb):
    from knowledge.models import GraphEdge, GraphEntity

    other = TenantFactory()
    other_kb = create_knowledge_base(tenant=other, name="other")
    entity = GraphEntity.objects.get(kb_version=sample_kb.active_version, name="ppr-9087")
    # a forged row tying the entity to another tenant's version must not show on its page
    stranger = GraphEntity.objects.create(tenant=other, kb_version=other_kb.active_version, name="x", label="STRANGER")
    GraphEdge.objects.create(tenant=other, kb_version=other_kb.active_version, source=entity, target=stranger,
                             weight=99.0, passages=1)  # fmt: skip
    page = admin_client.get(f"/admin/knowledge/graphentity/{entity.pk}/change/").content.decode()
    assert "STRANGER" not in page


def test_the_community_browser_lists_summaries_and_shows_supporting_passages(admin_client, sample_kb):
    from knowledge.models import GraphCommunity

    community = GraphCommunity.objects.filter(kb_version=sample_kb.active_version, level=0).first()
    listing = admin_client.get("/admin/knowledge/graphcommunity/", {"level__exact": 0}).content.decode()
    assert escape(str(community)) in listing
    page = admin_client.get(f"/admin/knowledge/graphcommunity/{community.pk}/change/").content.decode()
    assert escape(community.summary) in page
    for chunk_id in community.chunk_ids:
        assert f"/admin/knowledge/chunk/{chunk_id}/change/" in page
