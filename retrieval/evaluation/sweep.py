"""Sweeps: the best fusion settings for a KB, suggested and written onto it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowledge.knowledge_bases import update_search_settings
from knowledge.models import KnowledgeBase
from knowledge.search_settings import merged_search_settings
from retrieval.evaluation.runs import RunResult
from retrieval.evaluation.variants import DEPTH, Variant

SWEEP_WEIGHTS = "vector=0.3,0.5,0.7,1,1.5,bm25=1"
SWEEP_RRF_KS = (10, 20, 60)
SWEEP_CANDIDATES = (DEPTH, 2 * DEPTH)  # an evaluation cannot measure fewer than DEPTH: see the command


def best_run(results: Sequence[RunResult]) -> RunResult:
    """The hybrid run with the highest mean nDCG@10; ties go to the higher Recall@100, then the earlier run."""
    hybrid = [result for result in results if result.variant.mode == "hybrid"]
    if not hybrid:
        raise ValueError("a sweep compares hybrid runs: include the hybrid mode")

    def merit(result: RunResult) -> tuple[float, float]:
        metrics = result.summary()["metrics"]
        return metrics["ndcg@10"], metrics["recall@100"]

    return max(hybrid, key=merit)


def suggested_settings(variant: Variant) -> dict[str, Any]:
    """A run's fusion settings as KB search settings (``knowledge.search_settings``): what it set."""
    suggested: dict[str, Any] = {"candidates": variant.candidates}
    if variant.weights is not None:
        suggested["weights"] = dict(variant.weights)
    if variant.fusion is not None:
        suggested["fusion"] = variant.fusion
    if variant.leg_weights is not None:
        suggested["leg_weights"] = variant.leg_weights
    if variant.leg_candidates is not None:
        suggested["leg_candidates"] = variant.leg_candidates
    if variant.rrf_k is not None:
        suggested["rrf_k"] = variant.rrf_k
    if variant.dense_weight_floor is not None:
        suggested["dense_weight_floor"] = variant.dense_weight_floor
    if variant.aggregate is not None:
        suggested["aggregate"] = variant.aggregate
    if variant.feedback is not None:
        keys = ("feedback_docs", "feedback_terms", "feedback_query_weight")
        suggested.update(dict(zip(keys, variant.feedback, strict=True)))
    return suggested


def write_suggested_settings(kb: KnowledgeBase, suggested: dict[str, Any]) -> dict[str, Any]:
    """Onto the KB's active version (the index they were measured on), over its other settings."""
    version = kb.active_version
    assert version is not None, "a swept knowledge base has an active version"
    return update_search_settings(kb, merged_search_settings(version.search_settings, suggested), version=version)
