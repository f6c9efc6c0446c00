"""Variants: the grids that expand to them, and the request and suggested settings each one gives."""

import pytest

from retrieval.evaluation.sweep import suggested_settings
from retrieval.evaluation.variants import DEPTH, build_variants, parse_feedback, parse_weight_grid


def test_weight_grids_expand_to_every_combination():
    assert parse_weight_grid("vector=0.5,bm25=1") == [(("vector", 0.5), ("bm25", 1.0))]
    assert parse_weight_grid("vector=0.5,1,bm25=1,2") == [
        (("vector", 0.5), ("bm25", 1.0)),
        (("vector", 0.5), ("bm25", 2.0)),
        (("vector", 1.0), ("bm25", 1.0)),
        (("vector", 1.0), ("bm25", 2.0)),
    ]
    with pytest.raises(ValueError, match="a value must follow a name"):
        parse_weight_grid("0.5,bm25=1")


def test_fusion_sweeps_give_one_row_per_value_for_hybrid_and_one_for_single_leg_modes():
    variants = build_variants(["bm25", "hybrid"], candidates=[100], rrf_ks=[20, 60])
    assert [v.label for v in variants] == ["bm25 cand=100", "hybrid cand=100 k=20", "hybrid cand=100 k=60"]
    request = variants[1].request("q", kb_id=7)
    assert (request.top_k, request.candidates, request.rrf_k, request.kb_ids) == (DEPTH, 100, 20, [7])


def test_fusion_methods_are_hybrid_variants_and_a_score_fusion_takes_no_rrf_k():
    variants = build_variants(["vector", "hybrid"], candidates=[100], rrf_ks=[20, 60], fusions=["rrf", "relevance"])
    assert [v.label for v in variants] == [
        "vector cand=100", "hybrid cand=100 fusion=rrf k=20", "hybrid cand=100 fusion=relevance",
        "hybrid cand=100 fusion=rrf k=60",
    ]  # fmt: skip
    request = variants[2].request("q", kb_id=7)
    assert (request.fusion, request.rrf_k) == ("relevance", None)
    assert suggested_settings(variants[2]) == {"candidates": 100, "fusion": "relevance"}


def test_leg_weights_and_leg_candidates_are_hybrid_variants_and_reach_the_request_and_the_suggestion():
    """Leg weights are RRF's (none for a score fusion); leg candidates apply to every fusion."""
    variants = build_variants(
        ["hybrid", "bm25"], candidates=[100], fusions=["rrf", "relevance"], leg_weights=["fixed", "evidence"],
        leg_candidates=["own", "union"],
    )  # fmt: skip
    assert [v.label for v in variants] == [
        "hybrid cand=100 fusion=rrf legs=fixed candidates_of=own",
        "hybrid cand=100 fusion=rrf legs=fixed candidates_of=union",
        "hybrid cand=100 fusion=rrf legs=evidence candidates_of=own",
        "hybrid cand=100 fusion=rrf legs=evidence candidates_of=union",
        "hybrid cand=100 fusion=relevance candidates_of=own", "hybrid cand=100 fusion=relevance candidates_of=union",
        "bm25 cand=100",
    ]  # fmt: skip
    fixed_own = variants[0].request("q", kb_id=7)
    assert (fixed_own.leg_weights, fixed_own.leg_candidates) == ("fixed", "own")
    assert variants[5].request("q", kb_id=7).leg_weights is None
    assert variants[6].request("q", kb_id=7).leg_candidates is None
    assert suggested_settings(variants[1]) == {
        "candidates": 100,
        "fusion": "rrf",
        "leg_weights": "fixed",
        "leg_candidates": "union",
    }


def test_feedback_variants_apply_to_the_modes_with_a_bm25_leg_and_reach_the_request():
    assert parse_feedback("10:5:0.7") == (10, 5, 0.7) and parse_feedback("0")[0] == 0
    with pytest.raises(ValueError, match="expected DOCS:TERMS:QUERY_WEIGHT"):
        parse_feedback("10:5")
    variants = build_variants(["vector", "bm25"], candidates=[100], feedbacks=[parse_feedback("0"), (10, 5, 0.7)])
    assert [v.label for v in variants] == ["vector cand=100", "bm25 cand=100 rm3=off", "bm25 cand=100 rm3=10x5@0.7"]
    request = variants[2].request("q", kb_id=7)
    assert (request.feedback_docs, request.feedback_terms, request.feedback_query_weight) == (10, 5, 0.7)
    assert suggested_settings(variants[2]) == {
        "candidates": 100,
        "feedback_docs": 10,
        "feedback_terms": 5,
        "feedback_query_weight": 0.7,
    }
