"""Versions gated on quality, on the sample KB with a judged set: a real worse version (32-token chunks)
is refused with its per-query losses and stays ready, a real equal one (the same settings rebuilt)
passes and is switched to; without a query set the gate falls back to the build's check and says so;
the report is read through the API and the console before a manual switch."""

from __future__ import annotations

import pytest

from knowledge.models import KnowledgeBase, KnowledgeBaseVersion
from knowledge.versions import fill_version, start_version_build, version_build_files
from retrieval import query_sets
from retrieval.evaluation import gate, kb_runs
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory
from tests.retrieval.evaluation.test_kb_runs import JUDGED

pytestmark = pytest.mark.django_db

RECENT = ["order status", "smart lock warranty", "camera offline", "wifi pairing"]
# Queries with a second relevant document: 32-token chunks fill the top 10 with one document's pieces.
SECOND_DOCUMENTS = {
    "camera offline": {"camera-offline.txt": 2, "sky-40117-guardcam-spec.txt": 1},
    "wifi pairing": {"wifi-pairing.md": 2, "sky-10023908-hub-pro.md": 1, "error-codes.html": 1},
}


def built(kb, django_capture_on_commit_callbacks, **settings) -> KnowledgeBaseVersion:
    """A ready version built in this process (the build task's own steps), not switched to."""
    with django_capture_on_commit_callbacks(execute=False):
        version, _ = start_version_build(kb, activate=False, **settings)
    return fill_version(version, version_build_files(version), on_progress=lambda done: None)


@pytest.fixture
def kb(sample_kb):
    return KnowledgeBase.objects.select_related("tenant", "active_version").get(pk=sample_kb.pk)


@pytest.fixture
def judged(kb):
    for query, grades in {**JUDGED, **SECOND_DOCUMENTS}.items():
        query_sets.judge(kb, query, grades, "console")
    client = client_for(kb.tenant)
    for query in RECENT:  # the tenant's recent real queries
        client.post("/api/v1/retrieval/hybrid", {"query": query, "kb_ids": [kb.pk]}, format="json")
    return kb


def test_a_worse_version_is_refused_with_its_losses_and_an_equal_one_is_switched_to(
    judged, django_capture_on_commit_callbacks
):
    kb = judged
    active_number = kb.active_version.number
    worse = built(kb, django_capture_on_commit_callbacks, chunk_size=32, chunk_overlap=0)
    refused = gate.check_version(kb, worse, activate=True)
    report = refused.report
    assert not refused.passes and not refused.activated
    assert report["ndcg@10"]["version"] < report["ndcg@10"]["active"] - report["margin"]
    assert report["losses"] and all(loss["delta"] < 0 for loss in report["losses"])
    assert report["overlap"]["queries"] == len(RECENT)
    worse.refresh_from_db()
    kb.refresh_from_db()
    assert worse.status == "ready" and kb.active_version.number == active_number
    # An evaluation run scores the ready version too (at evaluate's depth of 100, documents are found alike).
    run = kb_runs.execute_evaluation(kb_runs.start_evaluation(kb, {"version": worse.number}).pk)
    assert (run.status, run.version_number, run.revision) == ("done", worse.number, worse.revision)
    with pytest.raises(kb_runs.InvalidQuerySet):
        kb_runs.start_evaluation(kb, {"version": 99})

    equal = built(kb, django_capture_on_commit_callbacks)
    accepted = gate.check_version(kb, equal, activate=True)
    assert accepted.passes and accepted.activated
    assert accepted.report["ndcg@10"]["version"] >= accepted.report["ndcg@10"]["active"] - accepted.report["margin"]
    kb.refresh_from_db()
    assert kb.active_version.number == equal.number


def test_without_a_query_set_the_gate_falls_back_to_the_builds_check_and_says_so(
    kb, django_capture_on_commit_callbacks
):
    version = built(kb, django_capture_on_commit_callbacks)
    record = gate.check_version(kb, version, activate=False)
    assert record.passes and not record.activated
    assert record.report["query_set"] is False and record.report["reason"].startswith("no query set")


def test_the_report_is_read_through_the_api_and_the_console_before_a_manual_switch(
    judged, admin_client, django_capture_on_commit_callbacks
):
    kb = judged
    worse = built(kb, django_capture_on_commit_callbacks, chunk_size=32, chunk_overlap=0)
    url = f"/api/v1/knowledge-bases/{kb.pk}/versions/{worse.number}/gate"
    writer = client_for(kb.tenant, "ingest")
    assert writer.get(url).json()["error"]["code"] == "version_gate_not_found"
    compared = writer.post(url)
    assert compared.status_code == 200, compared.content
    body = compared.json()
    assert (body["passes"], body["activated"], body["version_number"]) == (False, False, worse.number)
    assert [loss["query"] for loss in body["report"]["losses"]] == ["wifi pairing", "camera offline"]
    assert client_for(kb.tenant).get(url).json() == body  # a search key reads it
    stranger = client_for(KnowledgeBaseFactory().tenant, "ingest")  # another tenant: as if the KB did not exist
    assert stranger.get(url).json()["error"]["code"] == "knowledge_base_not_found"

    page = admin_client.get("/admin/retrieval/retrievalrun/query-set/", {"kb": kb.pk})
    html = page.content.decode()
    assert f'data-number="{worse.number}"' in html and 'class="gate-refused"' in html
    assert html.count('class="gate-loss"') == 2
    admin_client.post("/admin/retrieval/retrievalrun/query-set/", {"kb": kb.pk, "switch": worse.number})
    kb.refresh_from_db()
    assert kb.active_version.number == worse.number  # a curator may still switch, having read the report
