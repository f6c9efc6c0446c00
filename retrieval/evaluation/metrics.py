"""Relevance metrics: pure functions over a ranking of corpus ids and a query's judgments, so they can
be checked by hand."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")

Judgments = dict[str, int]  # corpus id -> relevance grade


def distinct(ranking: Iterable[str]) -> list[str]:
    """A document's rank is the rank of its best chunk: keep each id at its first position only."""
    return list(dict.fromkeys(ranking))


def _dcg(gains: Iterable[float]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranking: Sequence[str], judgments: Judgments, k: int = 10) -> float:
    """nDCG@k as BEIR (pytrec_eval ``ndcg_cut``) computes it: gain = the relevance grade itself, not
    2^rel - 1, discounted by log2(rank + 1). The ideal ranking sorts every positive judgment, also
    those naming documents missing from the corpus, so unreachable judgments lower the score. The
    ranking is taken in the order given (the service breaks its own ties); 0.0 without a positive
    judgment."""
    ideal = _dcg(sorted((grade for grade in judgments.values() if grade > 0), reverse=True)[:k])
    if not ideal:
        return 0.0
    return _dcg(max(judgments.get(doc, 0), 0) for doc in distinct(ranking)[:k]) / ideal


def recall_at_k(ranking: Sequence[str], judgments: Judgments, k: int) -> float:
    """Relevant documents (grade > 0) in the top k / all relevant documents; 0.0 without any."""
    relevant = {doc for doc, grade in judgments.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(distinct(ranking)[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], judgments: Judgments, k: int = 10) -> float:
    """1 / rank of the first relevant document (grade > 0) within the top k, else 0.0."""
    for rank, doc in enumerate(distinct(ranking)[:k], start=1):
        if judgments.get(doc, 0) > 0:
            return 1 / rank
    return 0.0


def score_query(ranking: Sequence[str], judgments: Judgments) -> dict[str, float]:
    return {
        "ndcg@10": ndcg_at_k(ranking, judgments, 10),
        "recall@10": recall_at_k(ranking, judgments, 10),
        "recall@100": recall_at_k(ranking, judgments, 100),
        "mrr@10": mrr_at_k(ranking, judgments, 10),
    }


# The share of judged-relevant hits the reference threshold keeps on SciFact (issue 28's "threshold share").
KEPT_ON_REFERENCE = 0.9


def threshold_keeping(relevant_scores: Sequence[float] | np.ndarray, share: float = KEPT_ON_REFERENCE) -> float | None:
    """The highest ``relevance`` threshold that keeps at least ``share`` of these relevant hits; None without any."""
    if not len(relevant_scores):
        return None
    ordered = sorted(relevant_scores, reverse=True)
    return float(ordered[max(math.ceil(share * len(ordered)) - 1, 0)])


def kept_share(relevant_scores: Sequence[float], threshold: float) -> float | None:
    """The share of these relevant hits a ``score_threshold`` of ``threshold`` keeps; None without any."""
    return float(np.mean(np.asarray(relevant_scores) >= threshold)) if len(relevant_scores) else None


def zero_relevance(judged_scores: Sequence[tuple[float, bool]]) -> dict[str, int]:
    """Hits at ``relevance`` 0 (what any threshold drops) and how many of them are judged relevant (goal: none)."""
    at_zero = [judged for score, judged in judged_scores if score <= 0.0]
    return {"hits": len(at_zero), "judged_relevant": sum(at_zero)}


def threshold_curve(judged_scores: Sequence[tuple[float, bool]], steps: int = 20) -> dict[str, Any]:
    """How a ``relevance`` threshold splits hits judged relevant (True) and not: the share of relevant hits
    kept and of the others dropped at thresholds 0, 1/steps, ..., 1, and the share of relevant hits kept
    at the threshold that drops half of the others (their median score); the threshold that keeps 90 %
    of the relevant hits, and the hits at 0."""
    relevant = np.array([score for score, judged in judged_scores if judged])
    others = np.array([score for score, judged in judged_scores if not judged])
    keeping = threshold_keeping(relevant)
    counts = {
        "relevant_hits": len(relevant),
        "other_hits": len(others),
        "at_zero": zero_relevance(judged_scores),
        # floored, so that the threshold as printed keeps what it says
        "threshold_keeping_90": None if keeping is None else math.floor(keeping * 1e4) / 1e4,
    }
    if not len(relevant) or not len(others):
        return {**counts, "curve": []}
    half = float(np.median(others))
    return {
        **counts,
        "threshold_dropping_half_of_others": round(half, 4),
        "relevant_kept_there": round(float(np.mean(relevant >= half)), 4),
        "curve": [
            {
                "threshold": round(t, 4),
                "relevant_kept": round(float(np.mean(relevant >= t)), 4),
                "others_dropped": round(float(np.mean(others < t)), 4),
            }
            for t in (i / steps for i in range(steps + 1))
        ],
    }
