"""The rerank stage (retrieval.services.rerank): the head reordered, or the fused order when the reranker fails."""

import pytest
from prometheus_client import REGISTRY

from engines.rerankers import reset_reranker
from tests.retrieval.services.conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_reranking_reorders_the_head(sample_kb, rerank_server):
    response = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is True and response.degraded == []
    scores = [hit.rerank_score for hit in response.results]
    assert scores == sorted(scores, reverse=True)
    assert all(hit.score == hit.rerank_score for hit in response.results)
    assert "rerank" in response.timings_ms


@pytest.mark.parametrize("fault", ["500", "garbage", "null"])
def test_reranker_faults_fall_back_to_the_fused_order(sample_kb, rerank_server, fault):
    baseline = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5)
    rerank_server.mode = fault
    response = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is False
    assert [d["stage"] for d in response.degraded] == ["rerank"]
    assert [h.chunk_id for h in response.results] == [h.chunk_id for h in baseline.results]


def test_rerank_without_a_reranker_says_so(sample_kb, settings):
    settings.RERANKER_URL = settings.RERANKER_MODEL = ""
    reset_reranker()
    response = run(sample_kb, "battery", mode="hybrid", top_k=3, rerank=True)
    assert response.reranked is False
    assert response.degraded == [
        {"stage": "rerank", "cause": "not_configured", "message": response.degraded[0]["message"]}
    ]
    assert len(response.results) == 3


def test_the_reranker_breaker_state_is_exported_after_each_call(sample_kb, rerank_server):
    def breaker_open() -> float | None:
        return REGISTRY.get_sample_value("retrieval_circuit_breaker_open", {"breaker": "reranker"})

    assert run(sample_kb, "battery", mode="hybrid", top_k=3, rerank=True).reranked is True
    assert breaker_open() == 0
    rerank_server.mode = "500"
    causes = [
        run(sample_kb, f"battery {n}", mode="hybrid", top_k=3, rerank=True).degraded[0]["cause"] for n in range(6)
    ]
    assert causes == ["server_error"] * 5 + ["circuit_open"]  # the breaker's default: 5 failures in a row
    assert breaker_open() == 1
