"""Evaluation runs of a KB on its query set: the task's body on the sample KB (figures as ``run_variant``
computes them, kept with settings, version and revision), the run page's charts read back against
the figures they draw, and a run started through the API on a real Celery worker."""

from __future__ import annotations

import re
from html import unescape

import numpy as np
import pytest

from knowledge.ingestion.files import discover_files
from knowledge.ingestion.pipeline import Ingester
from knowledge.knowledge_bases import create_knowledge_base
from retrieval import query_sets
from retrieval.evaluation import kb_runs
from retrieval.models import EvaluationRun
from tests.concurrency import wait_until
from tests.conftest import client_for
from tests.factories import KnowledgeBaseFactory

ORDER_QUERY = "帮我查下订单 ORD-2026-000817 的进度"
JUDGED = {
    ORDER_QUERY: {"order-status.md": 2},
    "how long is the warranty of a smart lock": {"warranty-policy.md": 2, "ppr-9087-smart-lock.md": 1},
    "my camera is offline": {"camera-offline.txt": 2},
    "wifi pairing fails": {"wifi-pairing.md": 2, "return-policy.md": 0},
}


def points(html: str, chart_id: str) -> list[dict]:
    svg = re.search(rf'<svg id="{chart_id}".*?</svg>', html, re.S).group(0)
    return [
        {name: unescape(value) for name, value in re.findall(r'data-(\w+)="([^"]*)"', mark)}
        for mark in re.findall(r"<(?:circle|rect|line) class=\"(?:point|bar|marker)[^>]*>", svg)
    ]


@pytest.fixture
def judged_sample(db, sample_kb):
    for query, grades in JUDGED.items():
        query_sets.judge(sample_kb, query, grades, "console")
    return sample_kb


def test_a_run_scores_the_active_version_with_its_settings_and_revision(judged_sample):
    kb = judged_sample
    run = kb_runs.start_evaluation(kb, {"mode": "hybrid"})
    assert (run.status, run.total, run.version_number) == ("queued", 4, kb.active_version.number)
    assert run.revision == kb.active_version.revision
    run = kb_runs.execute_evaluation(run.pk)  # the task's body (the test transaction never commits: no task sent)
    assert run.status == "done" and run.done == run.total == 4
    assert run.settings == {"version": None, "mode": "hybrid", "fusion": None, "weights": None, "rerank": False, "candidates": 100,
                            "rrf_k": None}  # fmt: skip
    ndcgs = [scores["ndcg@10"] for scores in run.per_query.values()]
    assert run.summary["metrics"]["ndcg@10"] == round(float(np.mean(ndcgs)), 4)
    assert run.summary["metrics"]["ndcg@10"] > 0.5  # the judged documents are what the sample search finds
    assert run.summary["latency_ms"]["p50"] > 0
    kept = run.summary["kb_threshold"]
    assert kept["threshold"] == kb_runs.FALLBACK_THRESHOLD and 0 <= kept["relevant_kept"] <= 1


def test_an_empty_set_or_unknown_settings_are_refused(db):
    kb = KnowledgeBaseFactory()
    query_sets.judge(kb, "nothing relevant", {"a.md": 0}, "console")
    with pytest.raises(kb_runs.EmptyQuerySet):
        kb_runs.start_evaluation(kb, {})
    with pytest.raises(kb_runs.InvalidQuerySet):
        kb_runs.start_evaluation(kb, {"mode": "psychic"})
    assert not EvaluationRun.objects.exists()


def test_a_named_version_of_a_kb_without_an_active_one_is_refused_not_a_crash(db):
    """Found by the type check: the active version was read unchecked (an AttributeError, a 500). A KB has
    none once its active version's row is deleted (``on_delete=SET_NULL``)."""
    kb = KnowledgeBaseFactory()
    kb.active_version.delete()
    kb.refresh_from_db()
    assert kb.active_version is None
    query_sets.judge(kb, "where is the manual", {"manual.md": 2}, "console")
    with pytest.raises(kb_runs.InvalidQuerySet, match="version 3 is not"):
        kb_runs.start_evaluation(kb, {"version": 3})
    assert not EvaluationRun.objects.exists()


def test_the_run_page_draws_history_wins_and_losses_and_the_threshold_curve(admin_client, judged_sample):
    kb = judged_sample
    first = kb_runs.execute_evaluation(kb_runs.start_evaluation(kb, {"mode": "vector"}).pk)
    second = kb_runs.execute_evaluation(kb_runs.start_evaluation(kb, {"mode": "bm25"}).pk)
    page = admin_client.get(f"/admin/retrieval/retrievalrun/evaluations/{second.pk}/")
    assert page.status_code == 200
    html = page.content.decode()

    history = points(html, "ndcg-history")
    drawn = {float(p["x"]): float(p["y"]) for p in history if "series" in p}
    assert drawn == {float(run.pk): run.summary["metrics"]["ndcg@10"] for run in (first, second)}

    rows = kb_runs.wins_and_losses(first, second)
    bars = [p for p in points(html, "wins-losses") if "label" in p]
    assert [(p["label"], float(p["value"])) for p in bars] == [(r["query"], r["delta"]) for r in rows if r["delta"]]
    assert page.context["wins"] == sum(r["delta"] > 0 for r in rows)
    compare = re.findall(r'<a href="([^"]+)" class="compare-link">', html)
    assert len(compare) == len(rows) and "b-mode=bm25" in unescape(compare[0])

    curve = second.summary["relevance_threshold"]
    drawn = [p for p in points(html, "threshold-curve") if "series" in p]
    kept = [(float(p["x"]), float(p["y"])) for p in drawn if p["series"] == "judged relevant kept"]
    assert kept == [(step["threshold"], step["relevant_kept"]) for step in curve["curve"]]
    [marker] = [p for p in points(html, "threshold-curve") if "series" not in p]
    assert float(marker["x"]) == curve["threshold_keeping_90"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_started_through_the_api_runs_on_a_worker_with_progress(celery_worker, tenant, tmp_path, embedder):
    kb = create_knowledge_base(tenant=tenant, name="manuals")
    (tmp_path / "lock.md").write_text("# PPR-9087 lock\n\nThe PPR-9087 smart lock fits doors 35 to 80 mm thick.")
    (tmp_path / "returns.txt").write_text("Returns are accepted within 30 days of delivery with the receipt.")
    Ingester(kb).ingest(discover_files([tmp_path]))
    client = client_for(tenant, "ingest")
    base = f"/api/v1/knowledge-bases/{kb.pk}"
    client.post(f"{base}/query-set/judgments", {"query": "door thickness for the lock", "judgments": {"lock.md": 2}},
                format="json")  # fmt: skip
    client.post(f"{base}/query-set/judgments", {"query": "can I return it", "judgments": {"returns.txt": 1}},
                format="json")  # fmt: skip
    started = client.post(f"{base}/evaluations", {"mode": "hybrid"}, format="json")
    assert started.status_code == 202, started.content
    url = f"{base}/evaluations/{started.json()['id']}"
    done = wait_until(lambda: (body := client.get(url).json())["status"] in ("done", "failed") and body, timeout=120,
                      message="the evaluation run to finish")  # fmt: skip
    assert done["status"] == "done", done["error"]
    assert (done["done"], done["total"]) == (2, 2)
    assert done["metrics"]["ndcg@10"] == 1.0 and done["metrics"]["mrr@10"] == 1.0
    assert done["recommended_threshold"] is not None
    assert [run["id"] for run in client.get(f"{base}/evaluations").json()["results"]] == [done["id"]]


def test_the_recommended_threshold_becomes_the_kbs_default_and_dify_applies_it_when_it_sends_none(
    admin_client, judged_sample
):
    kb = judged_sample
    run = kb_runs.execute_evaluation(kb_runs.start_evaluation(kb, {"mode": "hybrid"}).pk)
    recommended = run.summary["relevance_threshold"]["threshold_keeping_90"]
    page = f"/admin/retrieval/retrievalrun/evaluations/{run.pk}/"
    assert 'name="make_default"' in admin_client.get(page).content.decode()
    assert admin_client.post(page, {"make_default": "1"}).status_code == 302
    kb.refresh_from_db()
    assert kb.search_settings["score_threshold"] == recommended

    dify = client_for(kb.tenant)
    query = "How do I return an item for a refund?"
    hybrid = dify.post("/api/v1/retrieval/hybrid", {"query": query, "top_k": 10, "kb_ids": [kb.pk]}, format="json")
    hits = hybrid.json()["results"]
    assert any(hit["relevance"] < recommended for hit in hits)  # the default has something to drop
    body = {"knowledge_id": str(kb.pk), "query": query, "retrieval_setting": {"top_k": 10, "score_threshold": 0.0}}
    records = dify.post("/api/v1/dify/retrieval", body, format="json").json()["records"]
    assert [r["metadata"]["chunk_id"] for r in records] == [
        h["chunk_id"] for h in hits if h["relevance"] >= recommended
    ]
    body["retrieval_setting"]["score_threshold"] = 0.01  # the caller's own threshold wins
    records = dify.post("/api/v1/dify/retrieval", body, format="json").json()["records"]
    assert [r["metadata"]["chunk_id"] for r in records] == [h["chunk_id"] for h in hits if h["relevance"] >= 0.01]


def test_the_api_makes_the_recommended_threshold_the_default(judged_sample):
    kb = judged_sample
    run = kb_runs.execute_evaluation(kb_runs.start_evaluation(kb, {"mode": "hybrid"}).pk)
    url = f"/api/v1/knowledge-bases/{kb.pk}/evaluations/{run.pk}/threshold"
    assert client_for(kb.tenant).post(url).status_code == 403  # a search key may not change the KB
    answer = client_for(kb.tenant, "ingest").post(url)
    assert answer.json() == {"score_threshold": run.summary["relevance_threshold"]["threshold_keeping_90"]}
    other = KnowledgeBaseFactory()
    assert client_for(other.tenant, "ingest").post(url).json()["error"]["code"] == "knowledge_base_not_found"
