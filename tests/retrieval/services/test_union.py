"""The candidate union (retrieval.services.union): each leg ranks the other's first hits by its own score."""

import pytest

from tests.retrieval.services.conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_each_leg_ranks_the_union_of_both_legs_candidates_by_its_own_score(sample_kb):
    """``leg_candidates: "union"``: a passage one leg found gets the other leg's score too, the score that
    leg gives it in a search of its own (the dense cosine; the BM25 score, or nothing without a shared
    word), and each leg ranks the whole union by it. Lists shorter than the head each leg scores of the
    other's (``UNION_HEAD``), so that the union is every candidate, and the legs' candidates differ."""
    query = "How should I store the lithium battery pack?"
    own = run(sample_kb, query, mode="hybrid", top_k=8, candidates=8, leg_candidates="own")
    union = run(sample_kb, query, mode="hybrid", top_k=8, candidates=8, leg_candidates="union")
    assert own.candidates["fused"] > 8  # passages only one leg found
    assert union.candidates == own.candidates  # what each leg found, as before
    assert "union" in union.timings_ms and "union" not in own.timings_ms and not union.degraded
    cosine = {
        hit.chunk_id: hit.score for hit in run(sample_kb, query, mode="vector", top_k=400, candidates=400).results
    }
    bm25 = {hit.chunk_id: hit.score for hit in run(sample_kb, query, mode="bm25", top_k=400, candidates=400).results}
    dense_found = {hit.chunk_id for hit in run(sample_kb, query, mode="vector", top_k=8, candidates=8).results}
    assert any(hit.chunk_id not in dense_found for hit in union.results)  # found by BM25 alone, scored by both
    for hit in union.results:
        assert hit.retrievers["vector"]["score"] == pytest.approx(cosine[hit.chunk_id], abs=1e-5)
        if hit.chunk_id in bm25:
            assert hit.retrievers["bm25"]["score"] == pytest.approx(bm25[hit.chunk_id], abs=1e-4)
        else:
            assert "bm25" not in hit.retrievers
    for leg in ("vector", "bm25"):
        ranked = sorted(
            (hit.retrievers[leg] for hit in union.results if leg in hit.retrievers), key=lambda c: c["rank"]
        )
        assert [c["score"] for c in ranked] == sorted((c["score"] for c in ranked), reverse=True)


def test_a_failing_union_keeps_the_lists_as_found_and_says_so(sample_kb, monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    query = "How should I store the lithium battery pack?"
    own = run(sample_kb, query, mode="hybrid", top_k=20, candidates=8, leg_candidates="own")
    monkeypatch.setattr("retrieval.services.union._leg_over", broken)
    response = run(sample_kb, query, mode="hybrid", top_k=20, candidates=8, leg_candidates="union")
    assert [(d["stage"], d["cause"]) for d in response.degraded] == [("union", "internal_error")]
    assert [hit.chunk_id for hit in response.results] == [hit.chunk_id for hit in own.results]


def test_one_leg_is_its_own_union(sample_kb):
    for query, mode in (("warranty months", "bm25"), ("鱼香肉丝里面有鱼吗", "hybrid")):  # hybrid: dense skipped
        union, own = (run(sample_kb, query, mode=mode, top_k=10, leg_candidates=c) for c in ("union", "own"))
        assert "union" not in union.timings_ms
        assert [(h.chunk_id, h.fused_score) for h in union.results] == [
            (h.chunk_id, h.fused_score) for h in own.results
        ]
