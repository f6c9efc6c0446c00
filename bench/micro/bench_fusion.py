"""Fusion of a hybrid search's lists: two legs of 100 candidates each (the service's depth), half of
them shared, fused by rank (RRF) and by min-max scores with per-query evidence weights."""

from __future__ import annotations

import random

import pytest

from retrieval.fusion_functions import RankedList, min_max, reciprocal_rank_fusion, score_fusion, weighted_by_evidence


@pytest.fixture(scope="module")
def lists() -> list[RankedList]:
    rng = random.Random(44)
    vector = sorted(((n, rng.uniform(0.2, 0.9)) for n in range(100)), key=lambda hit: -hit[1])
    bm25 = sorted(((n, rng.uniform(1.0, 25.0)) for n in range(50, 150)), key=lambda hit: -hit[1])
    return [RankedList("vector", "q", 1.0, vector), RankedList("bm25", "q", 1.0, bm25)]


def test_reciprocal_rank_fusion(benchmark, lists):
    fused = benchmark(reciprocal_rank_fusion, lists)
    assert len(fused) == 150


def test_min_max_fusion_with_evidence_weights(benchmark, lists):
    def fuse():
        return score_fusion(weighted_by_evidence(lists, lambda ranked: 0.5), min_max)

    assert len(benchmark(fuse)) == 150
