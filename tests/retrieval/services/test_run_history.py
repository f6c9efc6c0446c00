"""The console's run history: what a run keeps, and that it stays bounded per user."""

import pytest
from django.contrib.auth.models import User

from retrieval.models import RetrievalRun
from retrieval.services import run_history
from retrieval.types import SearchHit, SearchResponse

pytestmark = pytest.mark.django_db


def response(hits: int) -> SearchResponse:
    results = [
        SearchHit(chunk_id=i, doc_id=1, kb_id=1, content="x", score=1 / i, source="bm25", rank=i, title=f"doc {i}",
                  source_uri="a.txt", doc_type="txt", metadata={})
        for i in range(1, hits + 1)
    ]  # fmt: skip
    return SearchResponse(results, "bm25", [], {}, False, [], [], {}, {"total": 1.5})


def test_a_run_keeps_its_form_its_top_hits_and_timings(tenant):
    user = User.objects.create_user("a")
    run = run_history.record_run(user, tenant, {"query": ["kettle"], "mode": ["bm25"]}, response(8))
    run.refresh_from_db()
    assert (run.query, run.params, run.timings_ms) == (
        "kettle",
        {"query": ["kettle"], "mode": ["bm25"]},
        {"total": 1.5},
    )
    assert [hit["chunk_id"] for hit in run.top_hits] == list(range(1, run_history.TOP_HITS_KEPT + 1))


def test_the_history_keeps_the_newest_runs_per_user(tenant, monkeypatch):
    monkeypatch.setattr(run_history, "HISTORY_PER_USER", 3)
    user, other = User.objects.create_user("a"), User.objects.create_user("b")
    run_history.record_run(other, tenant, {"query": ["theirs"]}, response(0))
    for i in range(5):
        run_history.record_run(user, tenant, {"query": [f"q{i}"]}, response(0))
    assert list(RetrievalRun.objects.filter(user=user).values_list("query", flat=True)) == ["q4", "q3", "q2"]
    assert RetrievalRun.objects.filter(user=other).count() == 1
