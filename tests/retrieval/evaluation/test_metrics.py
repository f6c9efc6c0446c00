"""Relevance metrics against hand-computed numbers."""

import math

import pytest

from retrieval.evaluation.metrics import (
    kept_share,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
    score_query,
    threshold_curve,
    threshold_keeping,
    zero_relevance,
)

LOG2_3 = math.log2(3)  # 1.5849625, the discount at rank 2


# --- nDCG -------------------------------------------------------------------------------------------


def test_ndcg_uses_the_grade_as_gain_with_a_log2_discount():
    judgments = {"a": 2, "b": 1, "c": 0, "d": 1}
    # rank:   1: c (gain 0)   2: a (gain 2)   3: x (unjudged, 0)   4: b (gain 1); d not retrieved
    # DCG  = 0/log2(2) + 2/log2(3) + 0/log2(4) + 1/log2(5) = 1.2618595 + 0.4306766 = 1.6925361
    # IDCG = grades sorted 2, 1, 1: 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.6309298 + 0.5 = 3.1309298
    # nDCG = 1.6925361 / 3.1309298 = 0.5405858
    # (gain 2^rel - 1 would give (3/1.585 + 1/2.3219) / (3 + 0.6309 + 0.5) = 0.5625)
    assert ndcg_at_k(["c", "a", "x", "b"], judgments, 10) == pytest.approx(0.5405858, abs=1e-6)


def test_ndcg_of_the_ideal_ranking_is_one_whatever_the_order_of_tied_grades():
    judgments = {"a": 1, "b": 1, "c": 2}
    assert ndcg_at_k(["c", "a", "b"], judgments) == pytest.approx(1.0)
    assert ndcg_at_k(["c", "b", "a"], judgments) == pytest.approx(1.0)


def test_a_document_counts_once_at_the_rank_of_its_best_chunk():
    # x has two chunks at ranks 1 and 2: deduplicated, a moves up from rank 3 to rank 2.
    # DCG = 1/log2(3) = 0.6309298; IDCG = 1 (a single relevant document at rank 1)
    # nDCG = 0.6309298 (without deduplication it would be 1/log2(4) = 0.5)
    assert ndcg_at_k(["x", "x", "a"], {"a": 1}) == pytest.approx(1 / LOG2_3)
    assert mrr_at_k(["x", "x", "a"], {"a": 1}) == pytest.approx(1 / 2)


def test_ndcg_cuts_at_k():
    ranking = [f"x{i}" for i in range(10)] + ["a"]  # a at rank 11
    assert ndcg_at_k(ranking, {"a": 1}, 10) == 0.0
    # at k = 11: DCG = 1/log2(12) = 0.2789429; IDCG = 1
    assert ndcg_at_k(ranking, {"a": 1}, 11) == pytest.approx(1 / math.log2(12))


def test_no_relevant_document_retrieved_scores_zero_everywhere():
    scores = score_query(["x", "y", "z"], {"a": 1, "b": 2})
    assert scores == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_a_query_without_positive_judgments_scores_zero_not_nan():
    scores = score_query(["a"], {"a": 0})
    assert scores == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}


def test_judgments_of_documents_missing_from_the_corpus_still_count():
    judgments = {"a": 1, "gone": 1}  # "gone" can never be retrieved
    # DCG = 1/log2(2) = 1; IDCG = 1 + 1/log2(3) = 1.6309298; nDCG = 0.6131472
    assert ndcg_at_k(["a", "x"], judgments) == pytest.approx(1 / (1 + 1 / LOG2_3))
    # Recall = 1 relevant retrieved / 2 relevant judged = 0.5
    assert recall_at_k(["a", "x"], judgments, 10) == 0.5
    assert mrr_at_k(["a", "x"], judgments) == 1.0


# --- Recall and MRR ---------------------------------------------------------------------------------


def test_recall_counts_relevant_documents_within_k_over_all_relevant():
    judgments = {"a": 1, "b": 1, "c": 1, "n": 0}
    ranking = ["a", "n"] + [f"x{i}" for i in range(8)] + ["b"]  # a at 1, n (grade 0) at 2, b at 11
    assert recall_at_k(ranking, judgments, 10) == pytest.approx(1 / 3)  # a only: 1 / 3
    assert recall_at_k(ranking, judgments, 100) == pytest.approx(2 / 3)  # a and b: 2 / 3


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_document_within_ten():
    assert mrr_at_k(["n", "x", "b"], {"n": 0, "b": 1}) == pytest.approx(1 / 3)  # n is judged 0: b at rank 3
    assert mrr_at_k([f"x{i}" for i in range(10)] + ["b"], {"b": 1}) == 0.0  # rank 11 is beyond the cut


# --- relevance thresholds -------------------------------------------------------------------------


def test_threshold_curve_counts_relevant_hits_kept_where_half_of_the_others_drop():
    relevant, others = [0.9, 0.6, 0.3], [0.5, 0.2, 0.1, 0.4, 0.3]
    judged = [(score, True) for score in relevant] + [(score, False) for score in others]
    curve = threshold_curve(judged, steps=4)
    # the others' median is 0.3: the relevant hits at 0.9, 0.6 and 0.3 all stay
    assert curve["threshold_dropping_half_of_others"] == 0.3 and curve["relevant_kept_there"] == 1.0
    at_half = {"threshold": 0.5, "relevant_kept": pytest.approx(2 / 3, abs=1e-4), "others_dropped": 0.8}
    assert curve["curve"][2] == at_half
    assert curve["curve"][0]["relevant_kept"] == 1.0 and curve["curve"][-1]["relevant_kept"] == 0.0
    alone = threshold_curve([(0.5, True)])
    assert (alone["relevant_hits"], alone["other_hits"], alone["curve"]) == (1, 0, [])


def test_the_threshold_keeping_90_percent_is_the_relevant_score_at_that_share():
    relevant = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05]
    assert threshold_keeping(relevant) == 0.1  # keeps 9 of 10
    assert kept_share(relevant, 0.1) == 0.9
    assert threshold_keeping(relevant[:3]) == 0.7  # 90 % of 3 rounds up: all 3 kept
    assert threshold_keeping([]) is None and kept_share([], 0.5) is None
    # the same threshold applied to another set keeps what it keeps there
    assert kept_share([0.5, 0.09, 0.3, 0.0], 0.1) == 0.5


def test_hits_at_zero_relevance_count_those_judged_relevant():
    judged = [(0.0, True), (0.0, False), (0.0, False), (0.2, True), (0.1, False)]
    assert zero_relevance(judged) == {"hits": 3, "judged_relevant": 1}
    curve = threshold_curve(judged)
    assert curve["at_zero"] == {"hits": 3, "judged_relevant": 1}
    assert curve["threshold_keeping_90"] == 0.0  # 90 % of the two relevant hits: both, down to the one at 0
    assert threshold_curve([(0.25, True)])["threshold_keeping_90"] == 0.25
