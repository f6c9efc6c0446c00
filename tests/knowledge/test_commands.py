"""knowledge's management commands that the ingest tests (tests/tenants/test_commands.py) do not cover."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engines import get_lexical_index
from engines.base import LexicalDocument
from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from knowledge.models import Document, PendingLexicalChange
from tests.conftest import client_with_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def load_sample(**options) -> str:
    out = io.StringIO()
    call_command("load_sample", tenant="sample-demo", kb="sample", stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def status_of_search(raw_key: str) -> int:
    body = json.dumps({"query": "PPR-9087 smart lock installation"})
    response = client_with_key(raw_key).post("/api/v1/retrieval/bm25", data=body, content_type="application/json")
    return response.status_code


def printed_key(output: str) -> str:
    return re.search(r"^export API_KEY=(\S+)$", output, re.MULTILINE).group(1)


def test_load_sample_prints_a_working_key_and_the_admin_link_for_the_port_served(embedder):
    output = load_sample(base_url="http://127.0.0.1:8765")
    admin_line = r"^Admin console: http://127\.0\.0\.1:8765/admin/  user: admin  password: \S+$"
    assert re.search(admin_line, output, re.MULTILINE)
    assert Document.objects.filter(tenant__name="sample-demo", status=Document.Status.READY).count() > 0
    first_key = printed_key(output)
    assert status_of_search(first_key) == 200

    # A second run keeps the ingested documents, issues a new key and revokes the previous one.
    documents = Document.objects.filter(tenant__name="sample-demo").count()
    second_key = printed_key(load_sample())
    assert Document.objects.filter(tenant__name="sample-demo").count() == documents
    assert status_of_search(second_key) == 200
    assert status_of_search(first_key) == 403


def test_load_sample_loads_the_samples_curated_vocabulary_and_its_graph_names_them(embedder):
    from knowledge.management.commands.load_sample import SAMPLE_DIR, VOCABULARY_FOLDER
    from knowledge.models import DictionaryTerm, GraphEntity, KnowledgeBase

    output = load_sample()
    terms_file = (SAMPLE_DIR / VOCABULARY_FOLDER / "protected-terms.csv").read_text(encoding="utf-8")
    terms = set(DictionaryTerm.objects.filter(tenant__name="sample-demo").values_list("value", flat=True))
    assert "蜀香小馆" in terms and terms == {row["value"] for row in csv.DictReader(io.StringIO(terms_file))}
    groups_file = (SAMPLE_DIR / VOCABULARY_FOLDER / "synonyms.csv").read_text(encoding="utf-8")
    groups = list(csv.DictReader(io.StringIO(groups_file)))
    assert f"vocabulary: {len(terms) + len(groups)} protected terms and synonym groups added" in output
    DictionaryTerm.objects.filter(tenant__name="sample-demo", value="支付宝").delete()  # an admin's edit
    assert "vocabulary: " not in load_sample()  # the next start leaves a curated tenant's vocabulary alone
    assert not DictionaryTerm.objects.filter(tenant__name="sample-demo", value="支付宝").exists()
    assert not Document.objects.filter(tenant__name="sample-demo", source_uri__contains=VOCABULARY_FOLDER).exists()

    kb = KnowledgeBase.objects.get(tenant__name="sample-demo", name="sample")
    names = set(GraphEntity.objects.filter(kb_version=kb.active_version).values_list("name", flat=True))
    assert {"蜀香小馆", "鱼香肉丝", "宫保鸡丁"} <= names  # curated dish and shop names are entities
    assert not {"售价", "客人", "道菜", "无法", "信息"} & names  # plain nouns alone are not
    raw_key = printed_key(load_sample())
    body = json.dumps({"query": "Shuxiang Bistro"})  # the shop's synonym
    response = client_with_key(raw_key).post("/api/v1/retrieval/graph", data=body, content_type="application/json")
    assert response.status_code == 200 and "蜀香小馆" in response.json()["results"][0]["content"]


# --- check_kb -------------------------------------------------------------------------------------


@pytest.fixture
def checked_kb(tenant, embedder, tmp_path):
    """A KB of two ingested documents, rows and keyword index in step."""
    kb = create_knowledge_base(tenant=tenant, name="checked")
    (tmp_path / "a.txt").write_text("The zeppelin ZR-3 departs at dawn.\n\nIt lands at Lake Constance at dusk.")
    (tmp_path / "b.txt").write_text("The submarine NX-1 dives at noon.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    return kb


def check_kb(kb, **options) -> str:
    out = io.StringIO()
    call_command("check_kb", kb=kb.name, tenant=kb.tenant.name, stdout=out, **options)
    return out.getvalue()


def test_check_kb_reports_a_consistent_kb_as_ok(checked_kb):
    chunks = checked_kb.active_version.chunks.count()
    assert check_kb(checked_kb).startswith(
        f"ok {checked_kb} v1: {chunks} chunks, {chunks} index entries, 0 pending changes; 0 missing, 0 orphans"
    )


def test_check_kb_finds_index_drift_and_repair_fixes_it(checked_kb):
    version, index = checked_kb.active_version, get_lexical_index()
    zeppelin = Document.objects.get(knowledge_base=checked_kb, source_uri__endswith="/a.txt")
    orphan = LexicalDocument(chunk_id=10**12, doc_id=10**12, tenant_id=checked_kb.tenant_id, text="ghost")
    # zeppelin's chunks go missing, an entry without a row appears
    index.write(version.pk, [orphan], replacing=[zeppelin.pk], analyzer_version="", dictionary_fingerprint="")
    missing = zeppelin.chunks.count()
    with pytest.raises(CommandError, match="1 knowledge base version.s. drift: run with --repair"):
        check_kb(checked_kb)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("check_kb", kb=checked_kb.name, stdout=out)
    assert out.getvalue().startswith("DRIFT ")
    assert f"{missing} missing, 1 orphans, 0 duplicates" in out.getvalue()

    assert check_kb(checked_kb, repair=True).startswith("REPAIRED ")
    assert sorted(index.chunk_ids(version.pk)) == sorted(version.chunks.values_list("id", flat=True))
    assert check_kb(checked_kb).startswith("ok ")


def test_check_kb_repair_applies_a_pending_change(checked_kb):
    version = checked_kb.active_version
    submarine = Document.objects.get(knowledge_base=checked_kb, source_uri__endswith="/b.txt")
    PendingLexicalChange.objects.create(kb_version=version, document_ids=[submarine.pk])
    with pytest.raises(CommandError):
        check_kb(checked_kb)
    assert check_kb(checked_kb, repair=True).startswith("REPAIRED ")
    assert not PendingLexicalChange.objects.filter(kb_version=version).exists()


def test_check_kb_reports_ready_documents_without_chunks_even_after_repair(checked_kb):
    lost = Document.objects.create(
        knowledge_base=checked_kb, tenant=checked_kb.tenant, source_uri="lost.txt", doc_type="txt",
        status=Document.Status.READY, chunk_count=3,
    )  # fmt: skip
    out = io.StringIO()
    with pytest.raises(CommandError, match="re-ingest"):
        call_command("check_kb", kb=checked_kb.name, repair=True, stdout=out)
    report = "1 ready documents without chunks, 0 chunks outside their document's knowledge base"
    assert f"{report} (document ids [{lost.pk}])" in out.getvalue()


def test_check_kb_without_a_match_is_an_error(db):
    with pytest.raises(CommandError, match="no matching knowledge base"):
        call_command("check_kb", kb="nowhere", stdout=io.StringIO())


@pytest.mark.django_db(transaction=True)
def test_ingest_async_queues_the_files_for_the_worker(celery_worker, tenant, tmp_path):
    from celery.result import AsyncResult

    (tmp_path / "returns.txt").write_text("Returns are accepted within 30 days of delivery.")
    (tmp_path / "returns.txt.meta.json").write_text(json.dumps({"tags": ["policy"]}))
    out = io.StringIO()
    call_command("ingest", str(tmp_path), tenant=tenant.name, kb="handbook", run_async=True, stdout=out)
    task_id = re.search(r"task (\S+)$", out.getvalue().strip()).group(1)
    assert AsyncResult(task_id).get(timeout=120)["added"] == 1
    document = Document.objects.get(knowledge_base__name="handbook", tenant=tenant)
    assert (document.status, document.tags) == (Document.Status.READY, ["policy"])


def test_rebuild_vector_index_leaves_an_index_built_with_the_settings_alone(checked_kb):
    out = io.StringIO()
    call_command("rebuild_vector_index", stdout=out)
    dimension = checked_kb.embedding_dim
    built = "m 16, ef_construction 64"  # chosen for a small index: pgvector's defaults
    assert f"dimension {dimension}: already built with {built}" in out.getvalue()


def test_rebuild_vector_index_refuses_a_dimension_pgvector_cannot_index(db):
    with pytest.raises(CommandError, match="outside 1..4000"):
        call_command("rebuild_vector_index", "--dimension", "5000")
