"""The knowledge console through the admin's own views: every write must reach what the services keep
in step (versions, chunks' labels, lexical indexes, revisions), and searches must see it."""

from __future__ import annotations

import json
import re

import pytest
from django.conf import settings

from engines import get_lexical_index
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Chunk, Document, KnowledgeBase, KnowledgeBaseVersion
from tenants.models import Tenant
from tests.conftest import client_for
from tests.factories import ChunkFactory, TenantFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

ADMIN = "/admin/knowledge"
FAQ = "question,answer\nHow long is the kettle warranty?,Two years from delivery.\nCan I return opened tea?,No.\n"
FAQ_LABELS = {"title": "Kettle FAQ", "tags": ["faq", "old"], "metadata": {"shop_id": 1, "lang": "en"}}
MANUAL = "The garden hose reel mounts on any wall with four screws.\n\nRinse it before winter storage.\n"


@pytest.fixture
def kb(tenant, embedder):
    return create_knowledge_base(tenant=tenant, name="docs")


@pytest.fixture
def documents(kb, tmp_path) -> dict[str, Document]:
    """Two ingested documents: an FAQ (chunks carry their own ``question`` metadata) and a manual."""
    (tmp_path / "kettle.csv").write_text(FAQ)
    (tmp_path / "kettle.csv.meta.json").write_text(json.dumps(FAQ_LABELS))
    (tmp_path / "hose.txt").write_text(MANUAL)
    Ingester(kb).ingest(discover_files([tmp_path]))
    by_name = {doc.source_uri.rsplit("/", 1)[-1]: doc for doc in Document.objects.filter(knowledge_base=kb)}
    assert set(by_name) == {"kettle.csv", "hose.txt"} and all(doc.chunk_count for doc in by_name.values())
    return by_name


def search(tenant, body: dict, mode: str = "bm25") -> dict:
    client = client_for(tenant)
    response = client.post(f"/api/v1/retrieval/{mode}", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def version_rows(kb: KnowledgeBase) -> dict:
    """The versions inline as the change page submits it: its management form and each row's ids."""
    ids = list(kb.versions.values_list("pk", flat=True))
    rows = {"versions-TOTAL_FORMS": len(ids), "versions-INITIAL_FORMS": len(ids)}
    for i, version_id in enumerate(ids):
        rows.update({f"versions-{i}-id": version_id, f"versions-{i}-knowledge_base": kb.pk})
    return rows


def revision(kb: KnowledgeBase) -> int:
    return KnowledgeBaseVersion.objects.get(pk=kb.active_version_id).revision


# --- knowledge bases -----------------------------------------------------------------------------


def test_the_add_form_offers_only_what_the_service_takes(admin_client):
    page = admin_client.get(f"{ADMIN}/knowledgebase/add/")
    assert page.status_code == 200
    assert list(page.context["adminform"].form.fields) == [
        "tenant", "name", "description", "embedding_model", "chunking", "chunk_size", "chunk_overlap",
        "parent_chunk_size", "languages",
    ]  # fmt: skip
    assert not page.context["inline_admin_formsets"]


def test_adding_a_kb_creates_its_first_version_sized_for_its_model(admin_client, tenant, embedder):
    response = admin_client.post(
        f"{ADMIN}/knowledgebase/add/",
        {"tenant": tenant.pk, "name": "handbook", "description": "staff handbook", "embedding_model": "",
         "chunk_size": "", "chunk_overlap": "", "languages": ""},
    )  # fmt: skip
    assert response.status_code == 302, response.content
    kb = KnowledgeBase.objects.select_related("active_version").get(tenant=tenant, name="handbook")
    assert (kb.embedding_model, kb.embedding_dim) == (embedder.model_name, embedder.dimension)
    assert kb.chunk_size == min(settings.CHUNK_SIZE_TOKENS, embedder.max_tokens)
    assert kb.chunk_overlap == min(settings.CHUNK_OVERLAP_TOKENS, kb.chunk_size // 2)
    assert kb.languages == list(embedder.languages) and kb.description == "staff handbook"
    version = kb.active_version
    assert (version.number, version.status) == (1, KnowledgeBaseVersion.Status.ACTIVE)
    assert (version.embedding_model, version.embedding_dim) == (kb.embedding_model, kb.embedding_dim)
    assert search(tenant, {"query": "anything", "kb_ids": [kb.pk]})["total"] == 0  # searchable, empty


def test_given_settings_reach_the_service(admin_client, tenant, embedder):
    response = admin_client.post(
        f"{ADMIN}/knowledgebase/add/",
        {"tenant": tenant.pk, "name": "zh", "embedding_model": embedder.model_name, "chunk_size": 100,
         "chunk_overlap": 80, "languages": "zh,en"},
    )  # fmt: skip
    assert response.status_code == 302, response.content
    kb = KnowledgeBase.objects.get(tenant=tenant, name="zh")
    assert (kb.chunk_size, kb.chunk_overlap, kb.languages) == (100, 50, ["zh", "en"])  # overlap capped at half


def test_an_admin_chooses_parent_child_chunks_and_a_bad_size_is_a_form_error(admin_client, tenant, embedder):
    form = {
        "tenant": tenant.pk,
        "name": "manuals",
        "chunking": "parent_child",
        "chunk_size": 100,
        "parent_chunk_size": 400,
    }
    assert admin_client.post(f"{ADMIN}/knowledgebase/add/", form).status_code == 302
    kb = KnowledgeBase.objects.select_related("active_version").get(tenant=tenant, name="manuals")
    assert (kb.chunking, kb.chunk_size, kb.parent_chunk_size) == ("parent_child", 100, 400)
    assert (kb.active_version.chunking, kb.active_version.parent_chunk_size) == ("parent_child", 400)
    bad = admin_client.post(f"{ADMIN}/knowledgebase/add/", {**form, "name": "bad", "parent_chunk_size": 50})
    assert bad.status_code == 200
    assert "must not exceed parent_chunk_size (50)" in str(bad.context["adminform"].form.errors["parent_chunk_size"])
    assert not KnowledgeBase.objects.filter(tenant=tenant, name="bad").exists()
    assert "parent-child: small chunks searched" in admin_client.get(f"{ADMIN}/knowledgebase/").content.decode()


def test_an_unknown_model_or_a_taken_name_is_a_form_error(admin_client, kb):
    unknown = admin_client.post(
        f"{ADMIN}/knowledgebase/add/", {"tenant": kb.tenant_id, "name": "other", "embedding_model": "no-such-model"}
    )
    assert unknown.status_code == 200 and "unknown embedding model" in unknown.content.decode()
    taken = admin_client.post(f"{ADMIN}/knowledgebase/add/", {"tenant": kb.tenant_id, "name": kb.name})
    assert taken.status_code == 200 and taken.context["adminform"].form.errors
    assert list(KnowledgeBase.objects.filter(tenant=kb.tenant)) == [kb]


def test_editing_a_kb_changes_its_name_and_description_only(admin_client, kb):
    other_tenant = TenantFactory()
    before, versions = KnowledgeBase.objects.values().get(pk=kb.pk), list(kb.versions.values())
    response = admin_client.post(
        f"{ADMIN}/knowledgebase/{kb.pk}/change/",
        {"name": "renamed", "description": "new words", "tenant": other_tenant.pk, "embedding_model": "remote:x",
         "embedding_dim": 3, "chunk_size": 10, "chunk_overlap": 1, "languages": "fr", **version_rows(kb)},
    )  # fmt: skip
    assert response.status_code == 302, response.content
    after = KnowledgeBase.objects.values().get(pk=kb.pk)
    assert (after["name"], after["description"]) == ("renamed", "new words")
    assert {k: v for k, v in after.items() if k not in ("name", "description")} == {
        k: v for k, v in before.items() if k not in ("name", "description")
    }
    assert list(kb.versions.values()) == versions


def test_a_kbs_search_settings_are_edited_in_the_admin_and_checked(admin_client, kb):
    url = f"{ADMIN}/knowledgebase/{kb.pk}/change/"
    bad = admin_client.post(url, {"name": kb.name, "search_settings": '{"rrf_k": 0}', **version_rows(kb)})
    assert bad.status_code == 200 and "rrf_k must be an integer from 1 to 1000" in bad.content.decode()
    good = admin_client.post(
        url, {"name": kb.name, "search_settings": '{"rrf_k": 20.0, "weights": {"vector": 0.5}}', **version_rows(kb)}
    )
    assert good.status_code == 302, good.content
    kb.refresh_from_db()
    assert kb.search_settings == {"weights": {"vector": 0.5}, "rrf_k": 20}


def test_the_semantic_cache_is_a_checkbox_of_the_kbs_search_settings(admin_client, kb):
    url = f"{ADMIN}/knowledgebase/{kb.pk}/change/"
    page = admin_client.get(url).content.decode()
    assert 'name="semantic_cache"' in page and "Semantic cache" in page
    on = admin_client.post(
        url, {"name": kb.name, "search_settings": '{"rrf_k": 20}', "semantic_cache": "on", **version_rows(kb)}
    )
    assert on.status_code == 302, on.content
    kb.refresh_from_db()
    assert kb.search_settings == {"rrf_k": 20, "semantic_cache": True}
    page = admin_client.get(url).content.decode()  # the checkbox shows it, the JSON leaves it out
    assert re.search(r'<input[^>]*name="semantic_cache"[^>]*checked', page) and "&quot;semantic_cache&quot;" not in page
    # Unchecked, the JSON's own key does not turn it back on.
    off = admin_client.post(url, {"name": kb.name, "search_settings": '{"semantic_cache": true}', **version_rows(kb)})
    assert off.status_code == 302, off.content
    kb.refresh_from_db()
    assert kb.search_settings == {}


def test_renaming_a_kb_to_a_name_its_tenant_uses_is_a_form_error(admin_client, kb, embedder):
    sibling = create_knowledge_base(tenant=kb.tenant, name="sibling")
    url = f"{ADMIN}/knowledgebase/{sibling.pk}/change/"
    response = admin_client.post(url, {"name": kb.name, **version_rows(sibling)})
    assert response.status_code == 200 and "already has a knowledge base with this name" in response.content.decode()
    sibling.refresh_from_db()
    assert sibling.name == "sibling"


def bulk_delete(admin_client, model: str, ids: list[int]):
    return admin_client.post(f"{ADMIN}/{model}/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"})


def test_deleting_a_kb_drops_its_rows_and_its_lexical_index(
    admin_client, kb, documents, django_capture_on_commit_callbacks
):
    version_id = kb.active_version_id
    assert get_lexical_index().state(version_id) is not None
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(f"{ADMIN}/knowledgebase/{kb.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302, response.content
    assert not KnowledgeBase.objects.filter(pk=kb.pk).exists()
    assert not Chunk.objects.filter(knowledge_base_id=kb.pk).exists()
    assert not KnowledgeBaseVersion.objects.filter(pk=version_id).exists()
    assert get_lexical_index().state(version_id) is None


def test_the_bulk_delete_action_drops_every_kbs_lexical_index(
    admin_client, kb, documents, tmp_path, embedder, django_capture_on_commit_callbacks
):
    second = create_knowledge_base(tenant=kb.tenant, name="second")
    Ingester(second).ingest(discover_files([tmp_path / "hose.txt"]))
    version_ids = [kb.active_version_id, second.active_version_id]
    assert all(get_lexical_index().state(version_id) is not None for version_id in version_ids)
    with django_capture_on_commit_callbacks(execute=True):
        response = bulk_delete(admin_client, "knowledgebase", [kb.pk, second.pk])
    assert response.status_code == 302, response.content
    assert not KnowledgeBase.objects.filter(pk__in=[kb.pk, second.pk]).exists()
    assert all(get_lexical_index().state(version_id) is None for version_id in version_ids)


# --- documents -----------------------------------------------------------------------------------


def edit_labels(admin_client, document: Document, **labels):
    form = {"title": document.title, "tags": ",".join(document.tags), "metadata": json.dumps(document.metadata)}
    return admin_client.post(f"{ADMIN}/document/{document.pk}/change/", {**form, **labels})


def test_a_label_edit_reaches_every_chunk_and_searches_filtered_on_it(
    admin_client, kb, documents, django_capture_on_commit_callbacks
):
    faq, hose = documents["kettle.csv"], documents["hose.txt"]
    own = {  # what ingestion put on each chunk besides the document's metadata: its question, its row
        chunk_id: {key: value for key, value in metadata.items() if key not in FAQ_LABELS["metadata"]}
        for chunk_id, metadata in faq.chunks.values_list("pk", "metadata")
    }
    assert len(own) == 2 and all(metadata.get("question") for metadata in own.values())
    hose_labels = list(hose.chunks.values_list("tags", "metadata"))
    query = {"query": "kettle warranty", "top_k": 5}
    assert search(kb.tenant, query)["results"][0]["title"] == "Kettle FAQ"  # now cached
    old_revision = revision(kb)

    with django_capture_on_commit_callbacks(execute=True):  # the keyword index takes the labels on commit
        response = edit_labels(
            admin_client, faq, title="Kettle questions", tags="faq,fresh", metadata='{"shop_id": 2, "region": "eu"}'
        )
    assert response.status_code == 302, response.content

    faq.refresh_from_db()
    assert (faq.title, faq.tags, faq.metadata) == ("Kettle questions", ["faq", "fresh"], {"shop_id": 2, "region": "eu"})
    for chunk_id, tags, metadata in faq.chunks.values_list("pk", "tags", "metadata"):
        # The chunk's own key stays; the document's old "lang" is gone, its new keys are there.
        assert tags == ["faq", "fresh"]
        assert metadata == {**own[chunk_id], "shop_id": 2, "region": "eu"}
    assert list(hose.chunks.values_list("tags", "metadata")) == hose_labels  # other documents keep theirs
    assert revision(kb) == old_revision + 1

    answer = search(kb.tenant, query)
    assert not answer["cached"] and answer["results"][0]["title"] == "Kettle questions"
    fresh = search(kb.tenant, {"query": "kettle warranty", "filters": {"tags": "fresh", "metadata.region": "eu"}})
    assert fresh["total"] > 0 and {hit["doc_id"] for hit in fresh["results"]} == {faq.pk}
    assert search(kb.tenant, {"query": "kettle warranty", "filters": {"tags": "old"}})["total"] == 0
    assert search(kb.tenant, {"query": "kettle warranty", "filters": {"metadata.lang": "en"}})["total"] == 0


def test_labels_that_are_not_valid_change_nothing(admin_client, kb, documents):
    faq = documents["kettle.csv"]
    old_revision = revision(kb)
    response = edit_labels(admin_client, faq, metadata='["not", "an", "object"]')
    assert response.status_code == 200 and "must be a JSON object" in response.content.decode()
    response = edit_labels(admin_client, faq, tags="x" * 101)
    assert response.status_code == 200 and response.context["adminform"].form.errors
    faq.refresh_from_db()
    assert (faq.tags, faq.metadata) == (FAQ_LABELS["tags"], FAQ_LABELS["metadata"])
    assert revision(kb) == old_revision


def test_documents_are_not_added_in_the_admin(admin_client):
    assert admin_client.get(f"{ADMIN}/document/add/").status_code == 403


def test_deleting_a_document_removes_its_chunks_from_every_search(admin_client, kb, documents):
    hose = documents["hose.txt"]
    assert search(kb.tenant, {"query": "garden hose reel"})["total"] > 0
    assert get_lexical_index().search(kb.active_version_id, kb.tenant_id, ["hose", "reel"], 10, None)
    old_revision = revision(kb)
    response = admin_client.post(f"{ADMIN}/document/{hose.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302, response.content
    assert not Chunk.objects.filter(document_id=hose.pk).exists()
    assert Document.objects.get(pk=hose.pk).status == Document.Status.REMOVED  # until the purge task runs
    assert revision(kb) == old_revision + 1
    # BM25 reads the lexical index: no entry of the document is left there either.
    assert get_lexical_index().search(kb.active_version_id, kb.tenant_id, ["hose", "reel"], 10, None) == []
    assert search(kb.tenant, {"query": "garden hose reel"})["total"] == 0


def test_the_bulk_delete_action_goes_through_the_service(admin_client, kb, documents):
    ids = [document.pk for document in documents.values()]
    old_revision = revision(kb)
    response = bulk_delete(admin_client, "document", ids)
    assert response.status_code == 302, response.content
    assert not Document.objects.filter(pk__in=ids).exclude(status=Document.Status.REMOVED).exists()
    assert not Chunk.objects.filter(document_id__in=ids).exists()
    assert revision(kb) == old_revision + len(ids)
    assert search(kb.tenant, {"query": "kettle warranty garden hose"})["total"] == 0


# --- chunks --------------------------------------------------------------------------------------


def test_chunks_are_read_only(admin_client, db):
    chunk = ChunkFactory(tags=["faq"], metadata={"page": 1})
    view = admin_client.get(f"{ADMIN}/chunk/{chunk.pk}/change/")
    assert view.status_code == 200
    assert not view.context["adminform"].form.fields  # every field is shown read-only
    assert chunk.content in view.content.decode()
    edit = admin_client.post(
        f"{ADMIN}/chunk/{chunk.pk}/change/", {"content": "rewritten", "tags": "other", "metadata": "{}"}
    )
    assert edit.status_code == 403
    assert admin_client.get(f"{ADMIN}/chunk/add/").status_code == 403
    assert admin_client.post(f"{ADMIN}/chunk/{chunk.pk}/delete/", {"post": "yes"}).status_code == 403
    listing = bulk_delete(admin_client, "chunk", [chunk.pk])
    assert listing.status_code == 200 and not listing.context["action_form"]  # no actions: just the list again
    stored = Chunk.objects.get(pk=chunk.pk)
    assert (stored.content, stored.tags, stored.metadata) == (chunk.content, ["faq"], {"page": 1})


# --- tenants -------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["delete page", "bulk action"])
def test_deleting_a_tenant_deletes_its_knowledge_through_the_service(
    admin_client, kb, documents, how, django_capture_on_commit_callbacks
):
    version_id, tenant_id = kb.active_version_id, kb.tenant_id
    assert get_lexical_index().state(version_id) is not None
    with django_capture_on_commit_callbacks(execute=True):
        if how == "delete page":
            response = admin_client.post(f"/admin/tenants/tenant/{tenant_id}/delete/", {"post": "yes"})
        else:
            response = admin_client.post(
                "/admin/tenants/tenant/", {"action": "delete_selected", "_selected_action": [tenant_id], "post": "yes"}
            )
    assert response.status_code == 302, response.content
    assert not Tenant.objects.filter(pk=tenant_id).exists()
    assert not Chunk.objects.filter(tenant_id=tenant_id).exists()
    assert get_lexical_index().state(version_id) is None


# --- knowledge sources ----------------------------------------------------------------------------------


@pytest.fixture
def source_root(settings, tmp_path):
    (tmp_path / "root" / "handbook").mkdir(parents=True)
    settings.KNOWLEDGE_SOURCE_ROOTS = [str(tmp_path / "root")]
    return tmp_path / "root"


def test_a_source_added_in_the_admin_gets_its_beat_entry(admin_client, kb, source_root):
    from knowledge.models import KnowledgeSource

    form = {"knowledge_base": kb.pk, "kind": "folder", "path": "handbook", "urls": "", "interval_seconds": 120}
    response = admin_client.post(f"{ADMIN}/knowledgesource/add/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    source = KnowledgeSource.objects.get(knowledge_base=kb)
    assert (source.path, source.periodic_task.interval.every) == (str(source_root / "handbook"), 120)
    outside = admin_client.post(f"{ADMIN}/knowledgesource/add/", {**form, "path": "../elsewhere"})
    assert outside.status_code == 200 and "may not contain" in outside.content.decode()

    change = {"interval_seconds": "", "crontab": "*/5 * * * *", "enabled": "on", "runs-TOTAL_FORMS": 0,
              "runs-INITIAL_FORMS": 0}  # fmt: skip
    changed = admin_client.post(f"{ADMIN}/knowledgesource/{source.pk}/change/", change)
    assert changed.status_code == 302, changed.content.decode()[:3000]
    source.periodic_task.refresh_from_db()
    assert (source.periodic_task.interval, source.periodic_task.crontab.minute, source.periodic_task.enabled) == (
        None, "*/5", True
    )  # fmt: skip
    paused = admin_client.post(f"{ADMIN}/knowledgesource/{source.pk}/change/", {**change, "enabled": ""})
    assert paused.status_code == 302, paused.content.decode()[:3000]
    source.periodic_task.refresh_from_db()
    assert source.periodic_task.enabled is False
    page = admin_client.get(f"{ADMIN}/knowledgesource/").content.decode()
    assert "*/5 * * * *" in page and "never" in page  # its schedule and last run in the list


def test_a_url_sources_list_is_edited_in_the_admin_but_a_folders_path_is_not(admin_client, kb, source_root):
    from knowledge.sources import create_source

    urls = create_source(kb, kind="urls", urls=["https://example.com/a.html"], interval_seconds=60)
    form = {"urls": "https://example.com/a.html,https://example.com/b.html", "interval_seconds": 60, "enabled": "on",
            "runs-TOTAL_FORMS": 0, "runs-INITIAL_FORMS": 0}  # fmt: skip
    assert admin_client.post(f"{ADMIN}/knowledgesource/{urls.pk}/change/", form).status_code == 302
    urls.refresh_from_db()
    assert urls.urls == ["https://example.com/a.html", "https://example.com/b.html"]
    emptied = admin_client.post(f"{ADMIN}/knowledgesource/{urls.pk}/change/", {**form, "urls": ""})
    assert emptied.status_code == 200 and "A URL source needs URLs" in emptied.content.decode()

    folder = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    page = admin_client.get(f"{ADMIN}/knowledgesource/{folder.pk}/change/").content.decode()
    assert 'name="interval_seconds"' in page and 'name="path"' not in page and 'name="urls"' not in page
    moved = {**form, "path": "/elsewhere", "urls": "https://example.com/c.html"}
    assert admin_client.post(f"{ADMIN}/knowledgesource/{folder.pk}/change/", moved).status_code == 302
    folder.refresh_from_db()
    assert (folder.path, folder.urls) == (str(source_root / "handbook"), [])  # read-only fields are ignored


def test_sync_now_queues_the_same_task_as_the_api(admin_client, kb, source_root, django_capture_on_commit_callbacks):
    from knowledge.models import KnowledgeTask
    from knowledge.sources import create_source

    source = create_source(kb, kind="folder", path="handbook", interval_seconds=60)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = admin_client.post(
            f"{ADMIN}/knowledgesource/", {"action": "sync_now", "_selected_action": [source.pk]}
        )
    assert response.status_code == 302
    assert len(callbacks) == 1 and KnowledgeTask.objects.get(knowledge_base=kb).kind == KnowledgeTask.Kind.SYNC_SOURCE
