"""Document-aware ranking over hand-made fused lists: aggregation, grouping, passages."""

import pytest

from retrieval.fusion_functions import FusedCandidate
from retrieval.grouping import DAMPING, MAX_PASSAGES, aggregate, group_by_document


def fused(*scores: tuple[int, float]) -> list[FusedCandidate]:
    return [FusedCandidate(chunk_id=chunk_id, key=str(chunk_id), fused_score=score) for chunk_id, score in scores]


# chunk -> document: document 10 is matched once strongly, document 20 three times a little less
DOCUMENT_OF = {1: 10, 2: 20, 3: 20, 4: 30, 5: 20}
LIST = fused((1, 0.030), (2, 0.028), (3, 0.020), (4, 0.015), (5, 0.010))


def test_none_keeps_the_fused_order_and_gives_no_document_scores():
    ranked, scores = aggregate(LIST, DOCUMENT_OF, "none")
    assert ranked == LIST and scores == {}


def test_max_scores_a_document_by_its_best_chunk_and_brings_its_other_chunks_after_it():
    ranked, scores = aggregate(LIST, DOCUMENT_OF, "max")
    assert [c.chunk_id for c in ranked] == [1, 2, 3, 5, 4]
    assert scores == {1: 0.030, 2: 0.028, 3: 0.028, 5: 0.028, 4: 0.015}


def test_sum_adds_the_next_chunks_damped_so_a_document_matched_often_can_win():
    ranked, scores = aggregate(LIST, DOCUMENT_OF, "sum")
    twenty = 0.028 + DAMPING * 0.020 + DAMPING**2 * 0.010
    assert scores[2] == scores[3] == scores[5] == pytest.approx(twenty)
    assert twenty > 0.030  # so document 20 now leads
    assert [c.chunk_id for c in ranked] == [2, 3, 5, 1, 4]


def test_a_chunk_without_a_known_document_stands_alone():
    ranked, scores = aggregate(fused((7, 0.02), (8, 0.01)), {}, "sum")
    assert [c.chunk_id for c in ranked] == [7, 8] and scores == {7: 0.02, 8: 0.01}


def test_grouping_keeps_each_documents_best_chunk_with_its_others_as_passages():
    grouped = group_by_document(LIST, DOCUMENT_OF)
    assert [c.chunk_id for c in grouped.candidates] == [1, 2, 4]
    assert grouped.passages == {1: [], 2: [3, 5], 4: []}


def test_passages_are_capped():
    many = fused(*((i, 1.0 / i) for i in range(1, MAX_PASSAGES + 4)))
    grouped = group_by_document(many, {c.chunk_id: 1 for c in many})
    assert [c.chunk_id for c in grouped.candidates] == [1]
    assert grouped.passages[1] == list(range(2, MAX_PASSAGES + 2))
