"""``relevance``: the mappings by hand, and what it means on the sample knowledge base."""

import numpy as np
import pytest

from engines.embedders import get_embedder
from retrieval.relevance import (
    SAMPLE_SIZE,
    combined_relevance,
    dense_relevance,
    lexical_relevance,
    passage_sample,
    query_background,
)
from retrieval.relevance_calibration import calibrated
from retrieval.services.search import search
from retrieval.types import SearchRequest

# The sample KB's off-topic queries stay under a raw 0.3 and its on-topic best hits above it: that bound
# on the scale ``relevance`` is shown on (retrieval.relevance_calibration).
OFF_TOPIC_CEILING = calibrated(0.3)


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


def test_background_is_a_high_quantile_of_the_querys_own_cosines_to_the_sample():
    sample = np.array([[1.0, 0.0], [0.0, 1.0], [2**-0.5, 2**-0.5], [-1.0, 0.0]])  # unit vectors
    query = np.array([3.0, 0.0])  # any length: cosines 1, 0, 0.7071, -1
    expected = float(np.quantile([1.0, 0.0, 2**-0.5, -1.0], 0.95))
    assert query_background(query, sample) == pytest.approx(expected)
    assert query_background(query, sample[:0]) == 0.0  # a version without passages


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
    # calibrated: the datasheet that answers is more likely relevant than not, the best unrelated hit far from it
    assert matching[0].relevance > 0.5 and unrelated[0].relevance < OFF_TOPIC_CEILING
    sample = passage_sample(sample_kb.active_version_id, sample_kb.active_version.revision)
    vector = get_embedder(sample_kb.embedding_model).embed_queries(["How should I store the lithium battery pack?"])[0]
    background = query_background(vector, sample)
    assert 0.0 < background < 1.0
    assert matching[0].retrievers["vector"]["score"] > background  # the matching passage clears the background

    threshold = sorted(hit.relevance for hit in matching)[len(matching) // 2]
    kept = hits("How should I store the lithium battery pack?", score_threshold=threshold)
    assert [hit.chunk_id for hit in kept] == [hit.chunk_id for hit in matching if hit.relevance >= threshold]
    assert [hit.rank for hit in kept] == list(range(1, len(kept) + 1))


@pytest.mark.slow
@pytest.mark.django_db
def test_the_readmes_filtered_vector_example_scores_its_on_topic_hits_and_not_an_off_topic_query(sample_kb):
    """Issue 28: a background of passage-to-passage cosines gave every hit of this example relevance 0."""
    filters = {"doc_type": {"in": ["pdf", "md"]}, "metadata.shop_id": 102}

    def hits(query, **options):
        request = SearchRequest(query=query, mode="vector", kb_ids=[sample_kb.pk], top_k=5, **options)
        return search(sample_kb.tenant, request).results

    on_topic = hits("how do I install the smart lock", filters=filters)
    assert on_topic and all("ppr-9087" in hit.source_uri for hit in on_topic)  # the lock's own manual and page
    assert all(hit.relevance > calibrated(0.1) for hit in on_topic)
    for options in ({"filters": filters}, {}):
        off_topic = hits("quantum chromodynamics lecture notes", **options)
        assert off_topic and max(hit.relevance for hit in off_topic) < OFF_TOPIC_CEILING
    hybrid = search(
        sample_kb.tenant,
        SearchRequest(query="quantum chromodynamics lecture notes", mode="hybrid", kb_ids=[sample_kb.pk], top_k=10),
    ).results
    assert max(hit.relevance for hit in hybrid) < OFF_TOPIC_CEILING


@pytest.mark.django_db
def test_a_versions_sample_is_read_once_per_revision(sample_kb, django_assert_num_queries):
    version = sample_kb.active_version
    first = passage_sample(version.pk, version.revision)
    assert 0 < len(first) <= SAMPLE_SIZE  # the sample KB has fewer chunks than a sample
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    with django_assert_num_queries(0):
        assert passage_sample(version.pk, version.revision) is first
    with django_assert_num_queries(1):  # a new revision: read again (the same chunks, the same sample)
        again = passage_sample(version.pk, version.revision + 1)
    assert again is not first and np.array_equal(again, first)


@pytest.mark.django_db
def test_a_full_sample_is_read_again_at_most_once_per_refresh_period(sample_kb, monkeypatch, django_assert_num_queries):
    """A version with more passages than a sample keeps it through content changes until
    ``SAMPLE_REFRESH_S`` have passed (hot updates bump the revision at every write)."""
    from types import SimpleNamespace

    from cachetools import LRUCache

    from retrieval import relevance

    clock = [1000.0]
    monkeypatch.setattr(relevance, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(relevance, "_samples", LRUCache(maxsize=4))
    monkeypatch.setattr(relevance, "SAMPLE_SIZE", 4)  # the sample KB holds more than 4 passages: a full sample
    version = sample_kb.active_version
    first = passage_sample(version.pk, version.revision)
    assert len(first) == 4
    clock[0] += relevance.SAMPLE_REFRESH_S - 1
    with django_assert_num_queries(0):  # a new revision within the period: the sample it has
        assert passage_sample(version.pk, version.revision + 1) is first
    clock[0] += 2
    with django_assert_num_queries(1):  # past the period: read again
        again = passage_sample(version.pk, version.revision + 2)
    assert again is not first and np.array_equal(again, first)
    with django_assert_num_queries(0):
        assert passage_sample(version.pk, version.revision + 2) is again


@pytest.mark.slow
@pytest.mark.django_db
def test_graph_hits_are_scored_on_the_same_scale_on_topic_above_the_off_topic_ceiling(sample_kb):
    """Issue 51: every graph hit had relevance 0.0, so any threshold dropped them all."""

    def hits(query):
        return search(
            sample_kb.tenant, SearchRequest(query=query, mode="graph", kb_ids=[sample_kb.pk], top_k=10)
        ).results

    on_topic = hits("Which battery pack does the PPR-9087 use?")
    assert on_topic and all(0.0 < hit.relevance <= 1.0 for hit in on_topic)
    assert on_topic[0].relevance > OFF_TOPIC_CEILING  # the off-topic ceiling of the dense and BM25 tests above
    assert [hit.relevance for hit in on_topic] == sorted((hit.relevance for hit in on_topic), reverse=True)
    off_topic = hits("Quantum Chromodynamics lecture notes by Professor Feynman")  # names written like names
    assert max((hit.relevance for hit in off_topic), default=0.0) < OFF_TOPIC_CEILING
    kept = search(
        sample_kb.tenant,
        SearchRequest(query="Which battery pack does the PPR-9087 use?", mode="graph", kb_ids=[sample_kb.pk],
                      top_k=10, score_threshold=OFF_TOPIC_CEILING),
    ).results  # fmt: skip
    assert kept and [hit.chunk_id for hit in kept] == [
        hit.chunk_id for hit in on_topic if hit.relevance >= OFF_TOPIC_CEILING
    ]
