"""A KB's judged query set: judging, import and export (BEIR zip and CSV, each read back), through the
service, the API (tenant isolation, errors) and the console (one-click judging on the retrieval testing
page, "add to set" from the search analytics, the set's page)."""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from html import unescape

import pytest

from retrieval import query_sets
from retrieval.errors import InvalidQuerySet
from retrieval.evaluation.datasets import load_dataset
from retrieval.models import JudgedQuery, Judgment
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory, SearchLogFactory

pytestmark = pytest.mark.django_db

TESTING = "/admin/retrieval/retrievalrun/"
QUERY_SET = "/admin/retrieval/retrievalrun/query-set/"
JUDGE = "/admin/retrieval/retrievalrun/judge/"
ANALYTICS = "/admin/retrieval/retrievalrun/analytics/"
ORDER_QUERY = "帮我查下订单 ORD-2026-000817 的进度"


def beir_zip(queries: list[dict], qrels: str, folder: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{folder}queries.jsonl", "\n".join(json.dumps(row) for row in queries) + "\n")
        archive.writestr(f"{folder}qrels/dev.tsv", qrels)
    return buffer.getvalue()


def test_a_judgment_adds_the_query_and_a_later_grade_replaces_the_earlier():
    kb = KnowledgeBaseFactory()
    query_sets.judge(kb, "  reset   the hub ", {"hub.md": 1, "faq.md": 0}, "console")
    query_sets.judge(kb, "reset the hub", {"hub.md": 2}, "console")
    [judged] = JudgedQuery.objects.filter(knowledge_base=kb)
    assert judged.query == "reset the hub"
    assert query_sets.grades_for(kb, "reset the hub") == {"hub.md": 2, "faq.md": 0}


@pytest.mark.parametrize(("grades", "field"), [({"a.md": 3}, "grade"), ({"": 1}, "document")])
def test_a_grade_out_of_range_or_a_nameless_document_is_refused(grades, field):
    kb = KnowledgeBaseFactory()
    with pytest.raises(InvalidQuerySet) as caught:
        query_sets.judge(kb, "q", grades, "api")
    assert caught.value.details == {"field": field}
    assert not JudgedQuery.objects.filter(knowledge_base=kb).exists()


def test_the_beir_export_is_a_folder_manage_py_evaluate_reads(tmp_path):
    kb = KnowledgeBaseFactory()
    query_sets.judge(kb, "warranty length", {"warranty-policy.md": 2, "return-policy.md": 0}, "console")
    query_sets.judge(kb, "no relevant one", {"catalog-2026.html": 0}, "console")
    with zipfile.ZipFile(io.BytesIO(query_sets.export_beir(kb))) as archive:
        archive.extractall(tmp_path)
    dataset = load_dataset(tmp_path, "test", with_corpus=False)
    judged = JudgedQuery.objects.get(knowledge_base=kb, query="warranty length")
    # evaluate keeps the queries with a relevant judgment, as a run does
    assert dataset.queries[str(judged.pk)] == "warranty length"
    assert dataset.qrels == {str(judged.pk): {"warranty-policy.md": 2, "return-policy.md": 0}}
    assert query_sets.as_dataset(kb).qrels == dataset.qrels


def test_a_csv_export_imports_into_another_kb_unchanged():
    source, target = KnowledgeBaseFactory(), KnowledgeBaseFactory()
    query_sets.judge(source, 'wifi, pairing "fails"', {"wifi-pairing.md": 2, "error-codes.html": 1}, "console")
    query_sets.add_query(source, "not judged yet", "analytics")
    text = query_sets.export_csv(source)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(row["query"], row["document"], row["grade"]) for row in rows] == [
        ('wifi, pairing "fails"', "wifi-pairing.md", "2"),
        ('wifi, pairing "fails"', "error-codes.html", "1"),
        ("not judged yet", "", ""),
    ]
    counts = query_sets.import_query_set(target, "set.csv", text.encode())
    assert counts.as_dict() == {"queries": 2, "judgments": 2}
    assert (
        query_sets.export_csv(target)
        .split("\n", 1)[1]
        .replace(str(JudgedQuery.objects.get(knowledge_base=target, query="not judged yet").pk), "N")
        .count("N,not judged yet")
        == 1
    )
    assert query_sets.grades_for(target, 'wifi, pairing "fails"') == {"wifi-pairing.md": 2, "error-codes.html": 1}


def test_a_beir_zip_in_a_folder_merges_and_unknown_query_ids_are_skipped():
    kb = KnowledgeBaseFactory()
    query_sets.judge(kb, "hub reset", {"faq.md": 1}, "console")
    content = beir_zip(
        [{"_id": "q1", "text": "hub reset"}, {"_id": "q2", "text": "bulb colours"}],
        "query-id\tcorpus-id\tscore\nq1\tsky-10023908-hub-pro.md\t2\nq2\tsky-20031-smart-bulb.html\t1\nq9\tx.md\t1\n",
        folder="myset/",
    )
    counts = query_sets.import_query_set(kb, "myset.zip", content)
    assert counts.as_dict() == {"queries": 2, "judgments": 2}
    assert query_sets.grades_for(kb, "hub reset") == {"faq.md": 1, "sky-10023908-hub-pro.md": 2}
    assert query_sets.grades_for(kb, "bulb colours") == {"sky-20031-smart-bulb.html": 1}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("set.txt", b"query,document,grade\n", "import a .zip"),
        ("set.csv", b"question,doc\nx,y\n", "missing: document, grade, query"),
        ("set.csv", b"query,document,grade\nq,a.md,high\n", "line 2: the grade 'high' is not a number"),
        ("set.zip", b"not a zip", "unreadable query set file"),
        ("set.zip", beir_zip([{"id": "q1"}], "q1\ta\t1\n"), "queries.jsonl line 1"),
    ],
)
def test_an_unreadable_file_is_refused_and_nothing_is_imported(name, content, message):
    kb = KnowledgeBaseFactory()
    with pytest.raises(InvalidQuerySet, match=re.escape(message)):
        query_sets.import_query_set(kb, name, content)
    assert not JudgedQuery.objects.filter(knowledge_base=kb).exists()


# --- API ------------------------------------------------------------------------------------------


def test_the_api_judges_lists_imports_and_exports(tenant):
    kb = KnowledgeBaseFactory(tenant=tenant)
    writer, reader = client_for(tenant, "ingest"), client_for(tenant)
    base = f"/api/v1/knowledge-bases/{kb.pk}/query-set"
    judged = writer.post(
        f"{base}/judgments", {"query": "order status", "judgments": {"order-status.md": 2}}, format="json"
    )
    assert judged.status_code == 200, judged.content
    assert judged.json()["judgments"] == {"order-status.md": 2}
    upload = io.BytesIO(b"query,document,grade\nwhere is my parcel,shipping-policy.md,1\n")
    upload.name = "more.csv"
    imported = writer.post(f"{base}/import", {"file": upload}, format="multipart")
    assert imported.json() == {"queries": 1, "judgments": 1}
    listed = reader.get(base).json()["queries"]
    assert [(row["query"], row["judgments"], row["origin"]) for row in listed] == [
        ("order status", {"order-status.md": 2}, "api"),
        ("where is my parcel", {"shipping-policy.md": 1}, "import"),
    ]
    exported = reader.get(base, {"export": "beir"})
    assert exported["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
        assert sorted(archive.namelist()) == ["qrels/test.tsv", "queries.jsonl"]
    assert "order status,order-status.md,2" in reader.get(base, {"export": "csv"}).content.decode()


def test_the_api_refuses_a_bad_grade_a_search_key_writing_and_another_tenants_kb(tenant):
    kb, theirs = KnowledgeBaseFactory(tenant=tenant), KnowledgeBaseFactory()
    writer = client_for(tenant, "ingest")
    bad = writer.post(
        f"/api/v1/knowledge-bases/{kb.pk}/query-set/judgments", {"query": "q", "judgments": {"a": 5}}, format="json"
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    refused = client_for(tenant).post(
        f"/api/v1/knowledge-bases/{kb.pk}/query-set/judgments", {"query": "q", "judgments": {}}, format="json"
    )
    assert refused.status_code == 403
    other = writer.get(f"/api/v1/knowledge-bases/{theirs.pk}/query-set")
    missing = writer.get("/api/v1/knowledge-bases/999999999/query-set")
    assert other.status_code == missing.status_code == 404
    assert other.json()["error"]["code"] == missing.json()["error"]["code"] == "knowledge_base_not_found"
    assert (
        writer.get(f"/api/v1/knowledge-bases/{kb.pk}/query-set", {"export": "xml"}).json()["error"]["code"]
        == "invalid_query_set"
    )


# --- console --------------------------------------------------------------------------------------


def test_a_hit_is_judged_with_one_click_on_the_testing_page(admin_client, sample_kb):
    page = admin_client.post(TESTING, {"tenant": sample_kb.tenant.pk, "query": ORDER_QUERY, "mode": "hybrid",
                                       "top_k": 5, "max_expansions": 3})  # fmt: skip
    first = page.context["outcome"]["hits"][0]
    assert first["document"] == "order-status.md" and first["grade"] is None
    html = page.content.decode()
    form = re.search(r'<form method="post" action="([^"]+)" class="judge">(.*?)</form>', html, re.S)
    assert unescape(form.group(1)) == JUDGE
    fields = dict(re.findall(r'<input type="hidden" name="(kb|query|document)" value="([^"]*)"', form.group(2)))
    assert {name: unescape(value) for name, value in fields.items()} == {
        "kb": str(sample_kb.pk), "query": ORDER_QUERY, "document": "order-status.md",
    }  # fmt: skip
    assert re.findall(r'name="grade" value="(\d)"', form.group(2)) == ["0", "1", "2"]

    answer = admin_client.post(JUDGE, {**fields, "query": ORDER_QUERY, "grade": "2"}, HTTP_ACCEPT="application/json")
    assert answer.json()["grade"] == 2
    again = admin_client.post(TESTING, {"tenant": sample_kb.tenant.pk, "query": ORDER_QUERY, "mode": "hybrid",
                                        "top_k": 5, "max_expansions": 3})  # fmt: skip
    assert again.context["outcome"]["hits"][0]["grade"] == 2
    assert 'class="grade grade-2 judged"' in again.content.decode()
    set_page = admin_client.get(QUERY_SET, {"kb": sample_kb.pk})
    assert [judged.query for judged in set_page.context["queries"]] == [ORDER_QUERY]
    assert 'data-document="order-status.md" data-grade="2"' in set_page.content.decode()


def test_judging_a_kb_the_user_cannot_see_is_a_404(client, django_user_model):
    kb = KnowledgeBaseFactory()
    staff = django_user_model.objects.create_user("curator", password="pw", is_staff=True)
    client.force_login(staff)
    answer = client.post(JUDGE, {"kb": kb.pk, "query": "q", "document": "a.md", "grade": "1"})
    assert answer.status_code == 404
    assert not Judgment.objects.exists()


def test_the_analytics_lists_send_a_query_to_the_set(admin_client):
    kb = KnowledgeBaseFactory()
    SearchLogFactory(tenant=kb.tenant, query="sky-10023908 manual", mode="bm25", hits=0, best_relevance=None,
                     kb_ids=[kb.pk])  # fmt: skip
    page = admin_client.get(ANALYTICS, {"tenant": kb.tenant.pk, "knowledge_base": kb.pk})
    html = page.content.decode()
    no_results = html[html.index('id="no-results"') : html.index("</table>", html.index('id="no-results"'))]
    assert 'class="add-to-set"' in no_results
    top = html[html.index('id="top"') : html.index("</table>", html.index('id="top"'))]
    assert "add-to-set" not in top
    back = f"{ANALYTICS}?tenant={kb.tenant.pk}&knowledge_base={kb.pk}"
    answer = admin_client.post("/admin/retrieval/retrievalrun/query-set/add/",
                               {"kb": kb.pk, "query": "sky-10023908 manual", "next": back})  # fmt: skip
    assert answer.status_code == 302 and answer["Location"] == back
    [judged] = JudgedQuery.objects.filter(knowledge_base=kb)
    assert (judged.query, judged.origin) == ("sky-10023908 manual", "analytics")


def test_the_set_page_imports_exports_and_removes(admin_client):
    kb = KnowledgeBaseFactory()
    upload = io.BytesIO(beir_zip([{"_id": "1", "text": "hub reset"}], "1\thub.md\t2\n"))
    upload.name = "set.zip"
    answer = admin_client.post(QUERY_SET, {"kb": kb.pk, "import": "Import", "file": upload})
    assert answer.status_code == 302
    assert query_sets.grades_for(kb, "hub reset") == {"hub.md": 2}
    exported = admin_client.get(QUERY_SET, {"kb": kb.pk, "export": "csv"})
    assert exported.content.decode().splitlines()[1].endswith(",hub reset,hub.md,2")
    judged = JudgedQuery.objects.get(knowledge_base=kb)
    admin_client.post(QUERY_SET, {"kb": kb.pk, "remove": judged.pk})
    assert not JudgedQuery.objects.filter(knowledge_base=kb).exists()
