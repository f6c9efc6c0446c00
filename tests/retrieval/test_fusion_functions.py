import pytest

from retrieval.fusion_functions import (
    EVIDENCE_FLOOR,
    RankedList,
    min_max,
    reciprocal_rank_fusion,
    score_fusion,
    weighted_by_evidence,
)

A, B, C, D = 1, 2, 3, 4


def ids(fused):
    return [candidate.chunk_id for candidate in fused]


def test_hand_computed_example_at_k_60():
    vector = RankedList("vector", "q", 1.0, [(A, 0.9), (B, 0.8), (C, 0.7)])
    bm25 = RankedList("bm25", "q", 1.0, [(B, 12.0), (D, 9.0), (A, 3.0)])
    fused = reciprocal_rank_fusion([vector, bm25], k=60)
    assert ids(fused) == [B, A, D, C]
    scores = {c.chunk_id: c.fused_score for c in fused}
    assert scores[B] == pytest.approx(1 / 62 + 1 / 61)
    assert scores[A] == pytest.approx(1 / 61 + 1 / 63)
    assert scores[D] == pytest.approx(1 / 62)
    assert scores[C] == pytest.approx(1 / 63)
    b = fused[0]
    assert (b.retrievers["vector"].rank, b.retrievers["bm25"].rank) == (2, 1)
    assert (b.retrievers["vector"].score, b.retrievers["bm25"].score) == (0.8, 12.0)


def test_weights_scale_each_lists_contribution():
    vector = RankedList("vector", "q", 3.0, [(C, 0.9)])
    bm25 = RankedList("bm25", "q", 1.0, [(D, 9.0), (C, 1.0)])
    fused = reciprocal_rank_fusion([vector, bm25], k=60)
    assert ids(fused) == [C, D]
    assert fused[0].fused_score == pytest.approx(3 / 61 + 1 / 62)
    # A zero weight removes a list entirely.
    assert ids(reciprocal_rank_fusion([RankedList("vector", "q", 0.0, [(C, 0.9)]), bm25], k=60)) == [D, C]


def test_k_changes_how_much_the_head_dominates():
    one = RankedList("bm25", "q", 1.0, [(A, 1.0), (B, 0.5)])
    other = RankedList("vector", "q", 1.0, [(C, 0.9), (D, 0.8), (5, 0.7), (6, 0.6), (7, 0.5), (B, 0.4)])
    # B: 1/(k+2) + 1/(k+6) against A: 1/(k+1). A small k lets a single first place win;
    # at k = 60 agreement between lists wins.
    assert ids(reciprocal_rank_fusion([one, other], k=1))[:2] == [C, A]  # tie: C has a vector similarity
    assert ids(reciprocal_rank_fusion([one, other], k=60))[0] == B


def test_duplicates_are_merged_by_key_and_accumulate_across_lists():
    same_content = {A: "h1", B: "h1", C: "h2"}  # A and B are identical passages in two documents
    vector = RankedList("vector", "q", 1.0, [(A, 0.9), (B, 0.9), (C, 0.5)])
    bm25 = RankedList("bm25", "q", 1.0, [(B, 5.0), (C, 4.0)])
    fused = reciprocal_rank_fusion([vector, bm25], k=60, dedup_key=same_content.__getitem__)
    assert [c.key for c in fused] == ["h1", "h2"]
    # Within the vector list only the best copy (rank 1) counts; bm25's rank-1 copy adds to it.
    assert fused[0].fused_score == pytest.approx(1 / 61 + 1 / 61)
    assert fused[0].chunk_id == A


def test_ties_go_to_higher_vector_similarity_then_lower_id():
    bm25 = RankedList("bm25", "q", 1.0, [(C, 5.0)])
    vector = RankedList("vector", "q", 1.0, [(D, 0.4)])
    fused = reciprocal_rank_fusion([bm25, vector], k=60)
    assert ids(fused) == [D, C]  # equal RRF scores; D has a vector similarity, C has none
    tie = reciprocal_rank_fusion(
        [RankedList("bm25", "q", 1.0, [(D, 1.0)]), RankedList("bm25", "p", 1.0, [(C, 1.0)])], k=60
    )
    assert ids(tie) == [C, D]


def test_query_variants_fuse_with_their_weights_and_are_reported():
    original = RankedList("bm25", "退货", 1.0, [(A, 3.0)])
    synonym = RankedList("bm25", "退换货", 0.5, [(B, 4.0), (A, 2.0)])
    fused = reciprocal_rank_fusion([original, synonym], k=60)
    assert ids(fused) == [A, B]
    assert fused[0].fused_score == pytest.approx(1 / 61 + 0.5 / 62)
    assert fused[0].matched_queries == ["退货", "退换货"]
    assert fused[1].matched_queries == ["退换货"]
    assert fused[0].retrievers["bm25"].query == "退货"  # best rank wins the explanation


def test_min_max_scales_a_list_from_its_worst_to_its_best_score():
    assert min_max(RankedList("bm25", "q", 1.0, [(A, 12.0), (B, 9.0), (C, 3.0)])) == pytest.approx([1.0, 2 / 3, 0.0])
    assert min_max(RankedList("vector", "q", 1.0, [(A, 0.4), (B, 0.4)])) == [1.0, 1.0]
    assert min_max(RankedList("vector", "q", 1.0, [])) == []


def test_score_fusion_adds_each_lists_weighted_normalized_scores():
    vector = RankedList("vector", "q", 0.5, [(A, 0.9), (B, 0.8), (C, 0.7)])
    bm25 = RankedList("bm25", "q", 1.0, [(B, 12.0), (D, 9.0), (A, 3.0)])
    fused = score_fusion([vector, bm25], min_max)
    scores = {c.chunk_id: c.fused_score for c in fused}
    # vector: A 1, B 0.5, C 0 (x 0.5); bm25: B 1, D 2/3, A 0
    assert scores == pytest.approx({A: 0.5, B: 0.25 + 1.0, C: 0.0, D: 2 / 3})
    assert ids(fused) == [B, D, A, C]
    assert (fused[0].retrievers["vector"].rank, fused[0].retrievers["bm25"].rank) == (2, 1)
    # RRF ranks the same lists by position only: A's first place in the vector list outweighs D.
    assert ids(reciprocal_rank_fusion([vector, bm25], k=60)) == [B, A, D, C]


def test_score_fusion_takes_the_normalization_it_is_given_and_merges_duplicates():
    same_content = {A: "h1", B: "h1", C: "h2"}
    vector = RankedList("vector", "q", 1.0, [(A, 0.9), (B, 0.9), (C, 0.5)])
    bm25 = RankedList("bm25", "q", 1.0, [(C, 5.0), (B, 4.0)])
    own_scores = lambda ranked: [score / 10 for _, score in ranked.hits]  # noqa: E731
    fused = score_fusion([vector, bm25], own_scores, dedup_key=same_content.__getitem__)
    assert [(c.key, c.chunk_id) for c in fused] == [("h2", C), ("h1", A)]
    assert fused[0].fused_score == pytest.approx(0.05 + 0.5)
    assert fused[1].fused_score == pytest.approx(0.09 + 0.4)  # the vector list's best copy only, then bm25's


def first_hit_evidence(values: dict[str, float | None]):
    """Evidence by retriever, as the search reads it from each list's first hit."""
    return lambda ranked: values[ranked.retriever]


def test_evidence_weights_follow_the_square_of_each_lists_first_hit_and_keep_their_sum():
    vector = RankedList("vector", "q", 1.0, [(A, 0.9), (B, 0.8)])
    bm25 = RankedList("bm25", "q", 1.0, [(B, 12.0), (A, 3.0)])
    weighted = weighted_by_evidence([vector, bm25], first_hit_evidence({"vector": 0.8, "bm25": 0.4}))
    # 0.8² : 0.4² = 4 : 1, scaled to the sum 2 the two weights had.
    assert [ranked.weight for ranked in weighted] == pytest.approx([1.6, 0.4])
    assert [ranked.hits for ranked in weighted] == [vector.hits, bm25.hits]
    # Fixed weights tie A and B (first and second in opposite lists: the higher vector similarity wins);
    # the evidence makes the dense leg's first hit win by its weight.
    assert ids(reciprocal_rank_fusion([vector, bm25])) == [A, B]
    assert ids(reciprocal_rank_fusion(weighted_by_evidence([vector, bm25], first_hit_evidence(
        {"vector": 0.4, "bm25": 0.8})))) == [B, A]  # fmt: skip


def test_a_list_without_a_calibrated_scale_keeps_its_weight_and_one_scored_list_changes_nothing():
    vector = RankedList("vector", "q", 2.0, [(A, 0.9)])
    bm25 = RankedList("bm25", "q", 1.0, [(B, 12.0)])
    graph = RankedList("graph", "q", 0.1, [(C, 3.0)])
    evidence = first_hit_evidence({"vector": 0.5, "bm25": 0.5, "graph": None})
    weighted = weighted_by_evidence([vector, bm25, graph], evidence)
    assert [ranked.weight for ranked in weighted] == pytest.approx([2.0, 1.0, 0.1])  # equal evidence: as configured
    alone = weighted_by_evidence([bm25, graph], first_hit_evidence({"bm25": 0.2, "graph": None}))
    assert [ranked.weight for ranked in alone] == pytest.approx([1.0, 0.1])


def test_a_list_without_evidence_only_fills_the_tail_and_equal_evidence_changes_nothing():
    vector = RankedList("vector", "q", 1.0, [(A, 0.1), (C, 0.05)])
    bm25 = RankedList("bm25", "q", 1.0, [(B, 12.0)])
    weighted = weighted_by_evidence([vector, bm25], first_hit_evidence({"vector": 0.0, "bm25": 0.6}))
    floor, total = EVIDENCE_FLOOR**2, EVIDENCE_FLOOR**2 + 0.6**2
    assert [ranked.weight for ranked in weighted] == pytest.approx([2 * floor / total, 2 * 0.36 / total])
    assert ids(reciprocal_rank_fusion(weighted)) == [B, A, C]  # still there, behind the leg with evidence
    none = weighted_by_evidence([vector, bm25], first_hit_evidence({"vector": 0.0, "bm25": 0.0}))
    assert [ranked.weight for ranked in none] == pytest.approx([1.0, 1.0])
    # A list weighted 0 by the request stays out and is not asked for evidence.
    skipped = RankedList("vector", "q", 0.0, [(A, 0.9)])
    asked = []
    weighted_by_evidence([skipped, bm25], lambda ranked: asked.append(ranked.retriever) or 0.5)
    assert asked == ["bm25"]
