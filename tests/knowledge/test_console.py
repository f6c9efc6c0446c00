"""Bulk import and export of synonyms and protected terms through the admin's views."""
import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile

from knowledge.models import DictionaryTerm, Synonym
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
    assert f'href="{GLANCE}" class="glance-link"' in admin_client.get("/admin/knowledge/knowledgebase/").content.decode()
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
