"""``relevance``: the mappings by hand, and what it means on the sample knowledge base."""

import numpy as np
import pytest

from retrieval.relevance import (
    background_similarity,
    combined_relevance,
    dense_background,
    dense_relevance,
    lexical_relevance,
)
from retrieval.services.search import search
from retrieval.types import SearchRequest


def test_bm25_relevance_is_the_share_of_the_ceiling():
    assert lexical_relevance(4.5, 10.0) == 0.45
    assert lexical_relevance(12.0, 10.0) == 1.0  # never above 1, even if an engine rounds past its bound
    assert lexical_relevance(3.0, 0.0) == 0.0  # no query token is in the index


def test_dense_relevance_starts_at_the_background_and_reaches_one_at_identity():
    assert dense_relevance(0.2, 0.2) == 0.0
    assert dense_relevance(0.1, 0.2) == 0.0
    assert dense_relevance(0.6, 0.2) == pytest.approx(0.5)
    assert dense_relevance(1.0, 0.2) == 1.0


def test_a_hit_scores_its_stronger_evidence():
    assert combined_relevance(0.3, 0.7) == 0.7
    assert combined_relevance(0.3, None) == 0.3
    assert combined_relevance(None, None) == 0.0


def test_background_is_a_high_quantile_of_cosines_between_documents():
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [1.0, 0.0]])
    # pairs across documents: (1,2) 0.0, (1,3) and (2,3) 0.7071; (1,4) is one document, identical, left out
    expected = float(np.quantile([0.0, 2**-0.5, 2**-0.5], 0.95))
    assert background_similarity(vectors, np.array([1, 2, 3, 1])) == pytest.approx(expected)
    assert background_similarity(vectors[:2], np.array([5, 5])) == 0.0
    assert background_similarity(vectors[:0], np.array([], dtype=int)) == 0.0


@pytest.mark.slow
@pytest.mark.django_db
def test_relevance_is_comparable_across_queries_and_thresholds_hits(sample_kb):
    def hits(query, **options):
        return search(sample_kb.tenant, SearchRequest(query=query, kb_ids=[sample_kb.pk], top_k=10, **options)).results

    matching = hits("How should I store the lithium battery pack?")
    unrelated = hits("migration patterns of arctic terns over the southern ocean")
    assert all(0.0 <= hit.relevance <= 1.0 for hit in matching + unrelated)
    # A search always returns its best passages; relevance says the second query's are poor.
    assert matching[0].relevance > 2 * unrelated[0].relevance
    background = dense_background(sample_kb.active_version_id, sample_kb.active_version.revision)
    assert 0.0 < background < 1.0
    assert matching[0].retrievers["vector"]["score"] > background  # the matching passage clears the background

    threshold = sorted(hit.relevance for hit in matching)[len(matching) // 2]
    kept = hits("How should I store the lithium battery pack?", score_threshold=threshold)
    assert [hit.chunk_id for hit in kept] == [hit.chunk_id for hit in matching if hit.relevance >= threshold]
    assert [hit.rank for hit in kept] == list(range(1, len(kept) + 1))
