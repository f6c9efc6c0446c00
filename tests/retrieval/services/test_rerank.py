"""The rerank stage (retrieval.services.rerank): the head reordered; when the reranker fails, the fused
or the dense order (RERANK_FALLBACK_ORDER), or a 503 (RERANK_ON_FAILURE=error)."""

import pytest
from prometheus_client import REGISTRY

from engines.rerankers import reset_reranker
from retrieval.errors import RerankerUnavailable
from tests.conftest import client_for
from tests.retrieval.services.conftest import run

FAULTS = ["500", "garbage", "null", "slow"]

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_reranking_reorders_the_head(sample_kb, rerank_server):
    response = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is True and response.degraded == []
    scores = [hit.rerank_score for hit in response.results]
    assert scores == sorted(scores, reverse=True)
    assert all(hit.score == hit.rerank_score for hit in response.results)
    assert "rerank" in response.timings_ms


@pytest.mark.parametrize("fault", FAULTS)
def test_reranker_faults_fall_back_to_the_fused_order(sample_kb, rerank_server, fault):
    baseline = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5)
    rerank_server.mode = fault
    response = run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    assert response.reranked is False
    assert [(d["stage"], d["fallback"]) for d in response.degraded] == [("rerank", "fused")]
    assert [h.chunk_id for h in response.results] == [h.chunk_id for h in baseline.results]


@pytest.mark.parametrize("fault", ["500", "slow"])
def test_the_dense_fallback_orders_by_cosine(sample_kb, rerank_server, settings, fault):
    settings.RERANK_FALLBACK_ORDER = "dense"
    query = "lithium battery pack"  # its fused order is not the dense one
    fused = run(sample_kb, query, mode="hybrid", top_k=5)
    dense = run(sample_kb, query, mode="vector", top_k=5)
    rerank_server.mode = fault
    response = run(sample_kb, query, mode="hybrid", top_k=5, rerank=True)
    assert [(d["stage"], d["fallback"]) for d in response.degraded] == [("rerank", "dense")]
    assert [h.chunk_id for h in response.results] == [h.chunk_id for h in dense.results]
    assert [h.chunk_id for h in response.results] != [h.chunk_id for h in fused.results]  # the setting did something
    cosines = [h.retrievers["vector"]["score"] for h in response.results]
    assert cosines == sorted(cosines, reverse=True)


@pytest.mark.parametrize("fault", FAULTS)
def test_with_on_failure_error_a_reranker_fault_is_a_503(sample_kb, rerank_server, settings, fault):
    settings.RERANK_ON_FAILURE = "error"
    rerank_server.mode = fault
    with pytest.raises(RerankerUnavailable, match="reranking is unavailable"):
        run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True)
    response = client_for(sample_kb.tenant).post(
        "/api/v1/retrieval/hybrid", {"query": "battery storage temperature", "rerank": True}, format="json"
    )
    assert response.status_code == 503 and response.json()["error"]["code"] == "reranker_unavailable"
    rerank_server.mode = "ok"
    assert run(sample_kb, "battery storage temperature", mode="hybrid", top_k=5, rerank=True).reranked is True


def test_rerank_without_a_reranker_says_so(sample_kb, settings):
    settings.RERANKER_URL = settings.RERANKER_MODEL = ""
    reset_reranker()
    response = run(sample_kb, "battery", mode="hybrid", top_k=3, rerank=True)
    assert response.reranked is False
    message = response.degraded[0]["message"]
    assert response.degraded == [
        {"stage": "rerank", "cause": "not_configured", "message": message, "fallback": "fused"}
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
