"""Bulk import and export of synonyms and protected terms through the admin's views."""

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from knowledge import console
from knowledge.models import DictionaryTerm, Document, KnowledgeBaseVersion, KnowledgeTask, Synonym
from knowledge.versions import VERSION_SETTINGS
from tests.factories import ChunkFactory, DocumentFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

SYNONYMS = "/admin/knowledge/synonym/"
TERMS = "/admin/knowledge/dictionaryterm/"
CSV = 'terms,replacements,weight,active\n"退货, 退换货",,0.6,\nlaptop,notebook,,\n'


def test_the_change_lists_link_the_import(admin_client):
    for url in (SYNONYMS, TERMS):
        assert f'href="{url}import/" class="import-link"' in admin_client.get(url).content.decode()


def test_an_uploaded_csv_is_previewed_then_applied(admin_client, tenant):
    upload = SimpleUploadedFile("synonyms.csv", CSV.encode())
    preview = admin_client.post(f"{SYNONYMS}import/", {"tenant": tenant.pk, "format": "synonyms-csv", "file": upload})
    assert preview.status_code == 200
    plan = preview.context["plan"]
    assert (len(plan.add), plan.errors) == (2, [])
    assert not Synonym.objects.exists()
    assert preview.context["form"]["text"].value() == CSV  # the lines travel to the apply step
    applied = admin_client.post(f"{SYNONYMS}import/", {"tenant": tenant.pk, "format": "synonyms-csv", "text": CSV,
                                                       "apply": "Apply"})  # fmt: skip
    assert applied.status_code == 302 and applied.url == SYNONYMS
    assert sorted(map(str, Synonym.objects.filter(tenant=tenant))) == ["laptop => notebook", "退货, 退换货"]


def test_lines_with_errors_are_listed_and_nothing_is_applied(admin_client, tenant):
    text = "value,kind,note\nPPR-9087,term,\nA(,pattern,\nX,colour,\n"
    page = admin_client.post(f"{TERMS}import/", {"tenant": tenant.pk, "format": "terms-csv", "text": text,
                                                 "apply": "Apply"})  # fmt: skip
    assert page.status_code == 200
    assert [number for number, _ in page.context["plan"].errors] == [3, 4]
    html = page.content.decode()
    assert "not a valid regular expression" in html and 'name="apply"' not in html
    assert not DictionaryTerm.objects.exists()


def test_an_import_another_one_overtook_is_previewed_again_with_its_error(admin_client, tenant, monkeypatch):
    """Another import adds the term between this one's plan and its write (as two at once would): the
    unique constraint refuses the write, and the page previews the import as things now are."""
    plan_import = console.plan_import

    def overtaken(tenant, file_format, text):
        plan = plan_import(tenant, file_format, text)
        DictionaryTerm.objects.get_or_create(tenant=tenant, value="PPR-9087")  # the other import lands
        return plan

    monkeypatch.setattr(console, "plan_import", overtaken)
    form = {"tenant": tenant.pk, "format": "terms-csv", "text": "value,kind,note\nPPR-9087,term,\n", "apply": "Apply"}
    page = admin_client.post(f"{TERMS}import/", form)
    assert page.status_code == 200
    assert [str(message) for message in get_messages(page.wsgi_request)] == [
        "another import added some of these terms meanwhile: preview the import again"
    ]
    plan = page.context["plan"]
    assert (len(plan.add), len(plan.unchanged)) == (0, 1)
    assert DictionaryTerm.objects.filter(tenant=tenant).count() == 1


def test_an_empty_import_and_a_format_of_the_other_model_are_form_errors(admin_client, tenant):
    empty = admin_client.post(f"{TERMS}import/", {"tenant": tenant.pk, "format": "terms-csv", "text": " "})
    assert "upload a file or paste some lines" in empty.content.decode()
    other = admin_client.post(f"{TERMS}import/", {"tenant": tenant.pk, "format": "synonyms-solr", "text": "a, b"})
    assert "format" in other.context["form"].errors and other.context["plan"] is None


def test_staff_without_add_permission_cannot_import(client, tenant):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_synonym"))
    client.force_login(user)
    assert client.get(f"{SYNONYMS}import/").status_code == 403


def test_the_export_actions_download_the_selected_rules(admin_client, tenant):
    kept = Synonym.objects.create(tenant=tenant, terms=["tv", "television"])
    Synonym.objects.create(tenant=tenant, terms=["phone", "mobile"])
    csv = admin_client.post(SYNONYMS, {"action": "export_csv", "_selected_action": [kept.pk]})
    assert csv["Content-Disposition"] == 'attachment; filename="synonyms.csv"'
    assert csv.content.decode() == 'terms,replacements,weight,active\n"tv, television",,0.5,true\n'
    solr = admin_client.post(SYNONYMS, {"action": "export_solr", "_selected_action": [kept.pk]})
    assert solr.content.decode() == "tv, television\n"
    term = DictionaryTerm.objects.create(tenant=tenant, value="PPR-9087")
    terms = admin_client.post(TERMS, {"action": "export_csv", "_selected_action": [term.pk]})
    assert terms.content.decode() == "value,kind,note\nPPR-9087,term,\n"


GLANCE = "/admin/knowledge/knowledgebase/glance/"


def test_knowledge_bases_at_a_glance(admin_client):
    kb = KnowledgeBaseFactory()
    ChunkFactory.create_batch(3, document=DocumentFactory(knowledge_base=kb))
    DocumentFactory(knowledge_base=kb, status="pending")
    DocumentFactory(knowledge_base=kb, status="failed", source_uri="bad.pdf", error="cannot parse <b>bad.pdf</b>")
    assert (
        f'href="{GLANCE}" class="glance-link"' in admin_client.get("/admin/knowledge/knowledgebase/").content.decode()
    )
    page = admin_client.get(GLANCE)
    (glance,) = [glance for glance in page.context["glances"] if glance.kb == kb]
    assert glance.documents_by_status == {"pending": 1, "ready": 1, "failed": 1, "removed": 0}
    assert glance.chunks == 3
    assert [document.source_uri for document in glance.last_errors] == ["bad.pdf"]
    html = page.content.decode()
    assert "cannot parse &lt;b&gt;bad.pdf&lt;/b&gt;" in html
    assert f"v{kb.active_version.number}: {kb.embedding_model} ({kb.embedding_dim} d)" in html


def test_the_glance_shows_only_what_the_user_may_see(client):
    KnowledgeBaseFactory()
    client.force_login(User.objects.create_user("curator", is_staff=True))
    page = client.get(GLANCE)
    assert page.context["glances"] == [] and "ask a superuser" in page.content.decode()


# --- one knowledge base's lifecycle -------------------------------------------------------------------


def lifecycle(kb) -> str:
    return f"/admin/knowledge/knowledgebase/{kb.pk}/lifecycle/"


def other_version(kb, number: int, status: str, **fields) -> KnowledgeBaseVersion:
    settings_of = {name: getattr(kb.active_version, name) for name in VERSION_SETTINGS}
    return KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=number, status=status, **settings_of, **fields)


def messages_of(response) -> list[str]:
    """The messages the page a response leads to shows (the page it redirects to, once followed)."""
    return [str(message) for message in get_messages(response.wsgi_request)]


def act(client, kb, data: dict) -> list[str]:
    """POST an action of the lifecycle page as its form does; the messages of the page it goes back to."""
    response = client.post(lifecycle(kb), data, follow=True)
    assert response.redirect_chain == [(lifecycle(kb), 302)]
    return messages_of(response)


@pytest.fixture
def staff(client):
    """A staff user who may see every tenant (``view_tenant``) and holds the permissions granted to it."""
    user = User.objects.create_user("curator", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    client.force_login(user)

    def grant(*codenames):
        user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
        return client

    return grant


def test_the_glance_links_each_kb_to_its_lifecycle_page_which_says_what_to_do_when_empty(admin_client):
    kb = KnowledgeBaseFactory()
    assert f'href="{lifecycle(kb)}" class="lifecycle-link"' in admin_client.get(GLANCE).content.decode()
    page = admin_client.get(lifecycle(kb))
    assert page.status_code == 200 and page.context["kb"] == kb
    html = page.content.decode()
    assert "No documents yet: upload files above" in html and "No tasks yet" in html
    assert f"python manage.py ingest FOLDER --tenant {kb.tenant.name} --kb {kb.name}" in html
    assert [version.number for version in page.context["versions"]] == [1]


def test_the_lifecycle_page_shows_documents_versions_and_their_actions(admin_client):
    kb = KnowledgeBaseFactory()
    report = {"pages": 3, "tables": 1, "ocr_pages": 1, "ocr_engine": "tesseract", "warnings": ["page 2 has <no> text"]}
    ChunkFactory.create_batch(2, document=DocumentFactory(knowledge_base=kb, source_uri="a.txt", parse_report=report))
    DocumentFactory(knowledge_base=kb, status="failed", source_uri="bad.pdf", error="cannot parse <b>bad.pdf</b>")
    other_version(kb, 2, "ready")
    other_version(kb, 3, "failed", error="b.txt: broken")
    page = admin_client.get(lifecycle(kb))
    html = page.content.decode()
    assert page.context["glance"].documents_by_status == {"pending": 0, "ready": 1, "failed": 1, "removed": 0}
    assert [doc.source_uri for doc in page.context["documents"]] == ["bad.pdf", "a.txt"]  # the latest first
    assert "cannot parse &lt;b&gt;bad.pdf&lt;/b&gt;" in html and "b.txt: broken" in html
    assert (
        '<td class="parse-report">3 pages, 1 table, 1 page read by OCR (tesseract). '
        "Warnings: page 2 has &lt;no&gt; text.</td>"
    ) in html
    rows = dict(re.findall(r'<tr class="version" data-version="(\d+)">(.*?)</tr>', html, re.S))
    assert 'value="Activate"' in rows["2"] and 'value="Retire"' in rows["2"]
    assert "<form" not in rows["1"] and "<form" not in rows["3"]  # the active one and a failed one: no action
    assert 'name="documents" value=' in html and 'value="Re-ingest selected"' in html


def test_who_may_see_and_act_on_a_knowledge_base(client, staff):
    kb = KnowledgeBaseFactory()
    not_staff = Client()
    for url in (lifecycle(kb), GLANCE):
        anonymous = not_staff.get(url)
        assert anonymous.status_code == 302 and anonymous.url.startswith("/admin/login/")
    not_staff.force_login(User.objects.create_user("reader"))
    assert not_staff.get(lifecycle(kb)).url.startswith("/admin/login/")
    assert not_staff.post(lifecycle(kb), {"action": "retire", "version": 1}).url.startswith("/admin/login/")
    assert staff().get(lifecycle(kb)).status_code == 403  # no permission on knowledge bases
    viewer = staff("view_knowledgebase")
    page = viewer.get(lifecycle(kb))
    assert page.status_code == 200 and page.context["can_change"] is False
    assert 'id="upload-form"' not in page.content.decode() and 'id="build-form"' not in page.content.decode()
    assert viewer.post(lifecycle(kb), {"action": "retire", "version": 1}).status_code == 403
    curator = User.objects.create_user("no-tenants", is_staff=True)  # may not see any tenant
    granted = Permission.objects.filter(codename__in=["view_knowledgebase", "change_knowledgebase"])
    curator.user_permissions.add(*granted)
    client.force_login(curator)
    assert client.get(lifecycle(kb)).status_code == 404
    assert client.post(lifecycle(kb), {"action": "upload"}).status_code == 404
    assert client.get(f"/admin/knowledge/knowledgebase/{'9' * 30}/lifecycle/").status_code != 500


def test_files_uploaded_in_the_console_are_queued_like_the_apis(admin_client, settings, embedder):
    kb = KnowledgeBaseFactory()
    files = [SimpleUploadedFile("lock.md", b"# Lock\n\nFits doors 35 to 80 mm."), SimpleUploadedFile("x.gif", b"png")]
    response = admin_client.post(
        lifecycle(kb), {"action": "upload", "files": files}, HTTP_X_REQUESTED_WITH="XMLHttpRequest"
    )
    assert response.json() == {"location": lifecycle(kb)}  # the page's script goes back there itself
    documents = {doc.source_uri: doc for doc in Document.objects.filter(knowledge_base=kb)}
    assert documents["lock.md"].status == "pending" and documents["lock.md"].original
    assert documents["x.gif"].status == "failed"
    task = KnowledgeTask.objects.get(knowledge_base=kb)
    assert task.kind == "ingest"
    (queued, refused) = messages_of(admin_client.get(response.json()["location"]))  # shown where the script goes
    assert f"Queued 1 file(s) for ingestion (task {task.task_id})" in queued and "x.gif: unsupported" in refused

    settings.UPLOAD_MAX_FILE_BYTES = 8
    big = act(admin_client, kb, {"action": "upload", "files": [SimpleUploadedFile("big.txt", b"0123456789")]})
    assert big == ["big.txt is larger than the allowed maximum of 8 bytes"]
    assert act(admin_client, kb, {"action": "upload"}) == ["This list may not be empty."]
    assert KnowledgeTask.objects.filter(knowledge_base=kb).count() == 1


def test_a_version_is_built_from_the_console_and_shown_in_build_with_its_progress(admin_client, embedder):
    kb = KnowledgeBaseFactory()
    bad = admin_client.post(lifecycle(kb), {"action": "build", "embedding_model": "no-such", "activate": "manual"})
    assert bad.status_code == 200 and "embedding_model" in bad.context["build_form"].errors
    codes = admin_client.post(lifecycle(kb), {"action": "build", "languages": "en, zh-Hans-CN", "activate": "manual"})
    assert "at most 8 characters" in str(codes.context["build_form"].errors["languages"])
    built = act(admin_client, kb, {"action": "build", "chunk_size": 64, "activate": "manual"})
    version = kb.versions.get(number=2)
    assert (version.status, version.chunk_size, version.embedding_model) == ("building", 64, kb.embedding_model)
    task = KnowledgeTask.objects.get(knowledge_base=kb, kind="build_version")
    assert built == [f"Building version 2 (task {task.task_id})."]
    assert act(admin_client, kb, {"action": "build", "activate": "manual"}) == ["version 2 is still building"]
    (glance,) = [glance for glance in admin_client.get(GLANCE).context["glances"] if glance.kb == kb]
    assert glance.building == [(version, task)]
    html = admin_client.get(GLANCE).content.decode()
    assert f'data-url="/admin/knowledge/knowledgebase/tasks/{task.task_id}/"' in html


def test_a_version_switching_to_parent_child_chunks_is_built_from_the_console(admin_client, embedder):
    kb = KnowledgeBaseFactory()
    refused = {"action": "build", "chunking": "parent_child", "chunk_size": 200, "parent_chunk_size": 100}
    bad = admin_client.post(lifecycle(kb), {**refused, "activate": "manual"})
    assert "must not exceed" in str(bad.context["build_form"].errors["parent_chunk_size"])
    act(admin_client, kb, {"action": "build", "chunking": "parent_child", "activate": "manual"})
    version = kb.versions.get(number=2)
    assert (version.chunking, version.chunk_size, version.parent_chunk_size) == ("parent_child", 128, 512)
    html = admin_client.get(lifecycle(kb)).content.decode()
    assert "parent-child 128 / " in html and " in 512 tokens" in html


def test_activate_roll_back_and_retire_from_the_console(admin_client):
    kb = KnowledgeBaseFactory()
    first, second, third = kb.active_version, other_version(kb, 2, "ready"), other_version(kb, 3, "ready")
    assert act(admin_client, kb, {"action": "activate", "version": 2}) == ["Version 2 is active: searches use it now."]
    kb.refresh_from_db()
    assert kb.active_version == second
    act(admin_client, kb, {"action": "activate", "version": 1})  # the rollback
    kb.refresh_from_db()
    assert kb.active_version == first and kb.versions.get(number=2).status == "retired"
    assert act(admin_client, kb, {"action": "retire", "version": 3}) == ["Version 3 is retired."]
    (refused,) = act(admin_client, kb, {"action": "retire", "version": 1})
    assert "only a ready one can be retired" in refused
    for number in ("x", "9" * 30):
        assert act(admin_client, kb, {"action": "activate", "version": number}) == ["No such version."]
    assert act(admin_client, kb, {"action": "activate", "version": 9}) == [f"knowledge base {kb.pk} has no version 9"]
    assert act(admin_client, kb, {"action": "delete"}) == ["Unknown action: 'delete'."]
    statuses = [KnowledgeBaseVersion.objects.get(pk=version.pk).status for version in (first, second, third)]
    assert statuses == ["active", "retired", "retired"]


def test_documents_are_reingested_from_the_page_and_the_change_list(admin_client):
    kb = KnowledgeBaseFactory()
    stored = DocumentFactory(knowledge_base=kb, original=f"kb-{kb.pk}/0/a.txt")
    unstored = DocumentFactory(knowledge_base=kb, original="")
    done, skipped = act(admin_client, kb, {"action": "reingest", "documents": [stored.pk, unstored.pk]})
    task = KnowledgeTask.objects.get(knowledge_base=kb)
    assert done == f"Re-ingesting 1 document(s) of {kb.name} (task {task.task_id})."
    assert skipped.endswith(unstored.source_uri)
    other = DocumentFactory(original="kb-0/0/b.txt")  # of another KB: never taken from this page
    nothing = act(admin_client, kb, {"action": "reingest", "documents": [other.pk, "9" * 30, "1 OR 1=1"]})
    assert nothing == ["Select the documents to re-ingest."]
    selected = {"action": "reingest", "_selected_action": [stored.pk, other.pk]}
    listed = admin_client.post("/admin/knowledge/document/", selected)
    assert listed.status_code == 302
    assert KnowledgeTask.objects.filter(kind="ingest").count() == 3  # one more per knowledge base


def test_a_task_status_is_read_only_for_tenants_the_user_sees(admin_client, client, staff):
    kb = KnowledgeBaseFactory()
    task = KnowledgeTask.objects.create(task_id=str(uuid.uuid4()), tenant=kb.tenant, knowledge_base=kb, kind="ingest")
    url = f"/admin/knowledge/knowledgebase/tasks/{task.task_id}/"
    status = admin_client.get(url).json()
    assert (status["task_id"], status["state"]) == (task.task_id, "PENDING")  # queued: no worker runs here
    assert (status["finished"], status["percent"]) == (False, None)
    client.force_login(User.objects.create_user("no-tenants", is_staff=True))
    assert client.get(url).status_code == 404


def test_a_task_older_than_its_kept_state_is_expired_and_not_followed(admin_client, settings):
    kb = KnowledgeBaseFactory()
    task = KnowledgeTask.objects.create(task_id=str(uuid.uuid4()), tenant=kb.tenant, knowledge_base=kb, kind="ingest")
    KnowledgeTask.objects.filter(pk=task.pk).update(created_at=timezone.now() - timedelta(seconds=61))
    settings.CELERY_RESULT_EXPIRES = 60
    status = admin_client.get(f"/admin/knowledge/knowledgebase/tasks/{task.task_id}/").json()
    assert (status["state"], status["finished"], status["percent"]) == ("EXPIRED", True, None)
    html = admin_client.get(lifecycle(kb)).content.decode()
    assert re.search(rf'data-task="{task.task_id}"[^>]* data-finished>', html)  # the page's script leaves it


def test_the_lifecycle_page_shows_the_sources_and_syncs_one_now(
    admin_client, settings, tmp_path, django_capture_on_commit_callbacks
):
    from knowledge.models import SourceRun
    from knowledge.sources import create_source

    kb, stranger = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    assert "No sources: add a folder" in admin_client.get(lifecycle(kb)).content.decode()
    for folder in ("handbook", "elsewhere"):
        (tmp_path / "root" / folder).mkdir(parents=True)
    settings.KNOWLEDGE_SOURCE_ROOTS = [str(tmp_path / "root")]
    source = create_source(kb, kind="folder", path="handbook", interval_seconds=90)
    theirs = create_source(stranger, kind="folder", path="elsewhere", interval_seconds=60)
    SourceRun.objects.create(source=source, status="succeeded", added=2, unchanged=1, finished_at=timezone.now())
    html = admin_client.get(lifecycle(kb)).content.decode()
    (row,) = re.findall(rf'<tr class="source" data-source="{source.pk}">(.*?)</tr>', html, re.S)
    assert str(tmp_path / "root" / "handbook") in row and "every 90 s" in row
    assert "succeeded, added 2, replaced 0, unchanged 1" in row and 'value="Sync now"' in row
    assert f'data-source="{theirs.pk}"' not in html  # only this KB's sources
    glance = admin_client.get(GLANCE).content.decode()
    (cell,) = re.findall(rf'<tr class="kb" data-kb="{kb.name}">.*?<td class="sources">(.*?)</td>', glance, re.S)
    assert str(tmp_path / "root" / "handbook") in cell and "every 90 s; last run" in cell and "succeeded" in cell

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        said = act(admin_client, kb, {"action": "sync", "source": source.pk})
    assert len(callbacks) == 1 and said == [f"Syncing source {source.pk} (task {KnowledgeTask.objects.get().task_id})."]
    assert KnowledgeTask.objects.get().kind == KnowledgeTask.Kind.SYNC_SOURCE
    for other in (theirs.pk, "x", ""):  # another KB's source (even one the user sees), or no id at all
        assert act(admin_client, kb, {"action": "sync", "source": other}) == ["No such source."]
    assert KnowledgeTask.objects.count() == 1


def test_the_glance_says_what_a_missing_analyzer_version_means(admin_client):
    """Issue 51: "analyzer –" said nothing."""
    KnowledgeBaseFactory()  # nothing indexed for keyword search: no analyzer version recorded
    html = admin_client.get(GLANCE).content.decode()
    assert "analyzer –" not in html and "not recorded: nothing indexed for keyword search yet" in html


def test_a_task_result_is_summed_up_in_words_without_ids_or_nested_reports():
    """Issue 51: task rows showed ``communities_task <uuid>`` (and the nested progress report)."""
    result = {
        "added": 3, "unchanged": 1, "failures": [], "progress": {"done": 4, "total": 4},
        "communities_task": str(uuid.uuid4()), "chunks_added": 12, "note": "",
    }  # fmt: skip
    summary = console._summary(result)
    assert summary == "added 3, unchanged 1, graph communities rebuilt by a follow-up task, chunks added 12"
    assert console._summary({"communities_task": None, "added": 0}) == "added 0"


def test_the_favicon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
    assert b"<svg" in response.content
    assert 'rel="icon"' in client.get("/admin/login/").content.decode()
