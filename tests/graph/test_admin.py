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

    version = sample_kb.active_version_id
    listing = admin_client.get("/admin/knowledge/graphentity/", {"q": "ppr-9087", "version": version})
    entity = GraphEntity.objects.get(kb_version=sample_kb.active_version, name="ppr-9087")
    assert listing.status_code == 200 and "PPR-9087" in listing.content.decode()
    assert f"/admin/knowledge/graphentity/{entity.pk}/change/?version={version}" in listing.content.decode()
    page = admin_client.get(f"/admin/knowledge/graphentity/{entity.pk}/change/").content.decode()
    strongest = GraphEdge.objects.filter(Q(source=entity) | Q(target=entity)).order_by("-weight").first()
    neighbour = strongest.target_id if strongest.source_id == entity.pk else strongest.source_id
    assert f"/admin/knowledge/graphentity/{neighbour}/change/?version={version}" in page
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
    version = sample_kb.active_version_id
    listing = admin_client.get("/admin/knowledge/graphcommunity/", {"level__exact": 0, "version": version})
    assert escape(str(community)) in listing.content.decode()
    url = f"/admin/knowledge/graphcommunity/0-{community.number}/change/?version={version}"
    assert url in listing.content.decode()
    page = admin_client.get(url).content.decode()
    assert escape(community.summary) in page
    for chunk_id in community.chunk_ids:
        assert f"/admin/knowledge/chunk/{chunk_id}/change/" in page


# --- curating: merge, rename, delete (graph.curation) ---------------------------------------


@pytest.fixture
def curated_kb(tmp_path, embedder):
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester

    (tmp_path / "lock.txt").write_text("The PPR-9087 door lock is made by Skyline Home.", encoding="utf-8")
    (tmp_path / "recall.txt").write_text("Skyline Homes recalled the AirSense monitor SKY-30452.", encoding="utf-8")
    kb = create_knowledge_base(tenant=TenantFactory(), name="curated", chunk_size=120, chunk_overlap=0)
    Ingester(kb).ingest(discover_files([tmp_path]))
    return kb


def curate_url(kb, name: str) -> str:
    from knowledge.models import GraphEntity

    return f"/admin/knowledge/graphentity/{GraphEntity.objects.get(kb_version=kb.active_version, name=name).pk}/curate/"


def test_the_curate_page_shows_the_entitys_kind_and_typed_relations(admin_client, curated_kb):
    from knowledge.models import GraphEntity

    lock = GraphEntity.objects.get(kb_version=curated_kb.active_version, name="ppr-9087")
    change = admin_client.get(f"/admin/knowledge/graphentity/{lock.pk}/change/").content.decode()
    assert f"/admin/knowledge/graphentity/{lock.pk}/curate/?version=" in change and "made_by" in change
    page = admin_client.get(curate_url(curated_kb, "ppr-9087")).content.decode()
    assert '<span class="entity-kind">code</span>' in page
    assert '<td class="relation">made_by</td>' in page  # from the lock to its maker
    assert '<td class="neighbour-kind">name</td>' in page  # Skyline Home
    maker = admin_client.get(curate_url(curated_kb, "skyline home")).content.decode()
    assert '<td class="relation">makes</td>' in maker  # read from the maker's side


def test_a_curator_merges_renames_and_deletes_from_the_console(admin_client, curated_kb):
    from knowledge.models import GraphEntity, GraphEntityRule
    from tests.knowledge.helpers import graph_names

    merged = admin_client.post(curate_url(curated_kb, "skyline homes"), {"action": "merge", "into": "Skyline Home"})
    target = GraphEntity.objects.get(kb_version=curated_kb.active_version, name="skyline home")
    assert merged.status_code == 302
    assert merged["Location"].endswith(f"/{target.pk}/change/?version={curated_kb.active_version_id}")
    assert "skyline homes" not in graph_names(curated_kb)
    admin_client.post(curate_url(curated_kb, "skyline home"), {"action": "rename", "label": "Skyline Home Ltd"})
    assert GraphEntity.objects.get(kb_version=curated_kb.active_version, name="skyline home ltd").chunk_count == 2
    deleted = admin_client.post(curate_url(curated_kb, "sky-30452"), {"action": "delete"})
    assert deleted.status_code == 302 and "sky-30452" not in graph_names(curated_kb)
    assert sorted(GraphEntityRule.objects.values_list("action", flat=True)) == ["delete", "merge", "rename"]
    missing = admin_client.post(curate_url(curated_kb, "ppr-9087"), {"action": "merge", "into": "no such thing"})
    assert missing.status_code == 200 and "no entity named" in missing.content.decode()
    rules = admin_client.get("/admin/knowledge/graphentityrule/").content.decode()
    assert "skyline homes" in rules and "skyline home ltd" in rules


def test_curating_needs_the_permission_and_a_visible_tenant(client, curated_kb):
    from django.contrib.auth.models import Permission, User

    staff = User.objects.create_user("curator", password="x", is_staff=True)
    client.force_login(staff)
    url = curate_url(curated_kb, "skyline home")
    assert client.get(url).status_code == 403  # no permission to add rules
    staff.user_permissions.add(Permission.objects.get(codename="add_graphentityrule"))
    staff = User.objects.get(pk=staff.pk)
    client.force_login(staff)
    assert client.get(url).status_code == 404  # may not see the tenant
    assert client.post(url, {"action": "delete"}).status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert client.get(url).status_code == 200


def test_the_graph_pages_say_when_the_graph_store_does_not_answer(admin_client, sample_kb, settings):
    from engines import registry

    settings.NEO4J_URL = "bolt://127.0.0.1:1"  # nothing listens there
    registry.graph_store.cache_clear()
    try:
        version = sample_kb.active_version_id
        for url in (
            f"/admin/knowledge/graphentity/?version={version}",
            f"/admin/knowledge/graphentity/1/change/?version={version}",
            f"/admin/knowledge/graphcommunity/?version={version}",
        ):
            page = admin_client.get(url)
            assert page.status_code == 503 and "graph_unavailable" in page.content.decode(), url
    finally:
        settings.NEO4J_URL = ""
        registry.graph_store.cache_clear()


def test_the_graph_pages_show_only_versions_of_tenants_the_user_may_see(client, sample_kb):
    from django.contrib.auth.models import Permission, User

    from knowledge.models import GraphEntity

    staff = User.objects.create_user("browser", password="x", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_graphentity", "view_graphcommunity"]))
    client.force_login(staff)
    version = sample_kb.active_version_id
    entity = GraphEntity.objects.get(kb_version=sample_kb.active_version, name="ppr-9087")
    listing = client.get("/admin/knowledge/graphentity/")
    assert listing.status_code == 200 and "PPR-9087" not in listing.content.decode()  # no tenant to see
    assert client.get("/admin/knowledge/graphentity/", {"version": version}).status_code == 404
    assert client.get(f"/admin/knowledge/graphentity/{entity.pk}/change/").status_code == 404
    assert client.get("/admin/knowledge/graphcommunity/", {"version": version}).status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert "PPR-9087" in client.get("/admin/knowledge/graphentity/", {"version": version, "q": "ppr"}).content.decode()
    assert client.get(f"/admin/knowledge/graphentity/{entity.pk}/change/").status_code == 200
