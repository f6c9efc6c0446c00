"""Running a variant: every judged query through the service's own ``search`` (what the API calls),
scored and timed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowledge.models import KnowledgeBase
from knowledge.selectors.search import SearchedKnowledge
from retrieval.evaluation.datasets import BeirDataset, corpus_id_from_uri
from retrieval.evaluation.metrics import METRICS, distinct, kept_share, score_query, threshold_curve
from retrieval.evaluation.variants import Variant
from retrieval.services.search import search
from tenants.models import Tenant


@dataclass
class RunResult:
    variant: Variant
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)  # metrics + latency_ms
    degraded_queries: int = 0
    dense_skipped_queries: int = 0
    # per query: its top-10 documents' relevance, and whether each is judged relevant
    judged_relevance: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)
    reference_threshold: float | None = None  # a threshold set elsewhere (SciFact's): the share it keeps here

    def judged(self, query_ids: Iterable[str] | None = None) -> list[tuple[float, bool]]:
        """The judged top-10 relevances of these queries (all by default)."""
        ids = self.judged_relevance.keys() if query_ids is None else query_ids
        return [pair for qid in ids for pair in self.judged_relevance.get(qid, [])]

    def summary(self) -> dict[str, Any]:
        threshold = threshold_curve(self.judged())
        if self.reference_threshold is not None:
            relevant = [score for score, judged in self.judged() if judged]
            share = kept_share(relevant, self.reference_threshold)
            threshold["kept_at_reference"] = {
                "threshold": self.reference_threshold,
                "relevant_kept": None if share is None else round(share, 4),
            }
        latencies = [scores["latency_ms"] for scores in self.per_query.values()]
        return {
            **self.variant.as_dict(),
            "queries": len(self.per_query),
            "metrics": {
                metric: round(float(np.mean([s[metric] for s in self.per_query.values()])), 4)
                if self.per_query
                else 0.0
                for metric in METRICS
            },
            "latency_ms": {
                "p50": round(float(np.percentile(latencies, 50)), 2) if latencies else None,
                "p95": round(float(np.percentile(latencies, 95)), 2) if latencies else None,
            },
            "degraded_queries": self.degraded_queries,
            "dense_skipped_queries": self.dense_skipped_queries,
            "relevance_threshold": threshold,
        }

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary(), "per_query": self.per_query}


def run_variant(
    tenant: Tenant,
    kb: KnowledgeBase,
    dataset: BeirDataset,
    variant: Variant,
    query_ids: Sequence[str],
    on_progress: Callable[[int], None] = lambda done: None,
    knowledge: SearchedKnowledge | None = None,
) -> RunResult:
    """Every query through ``search``; latency is the wall time of that call (one untimed warm-up
    first, so loading the model is not counted). ``knowledge``: the versions to search (a version not
    active yet, ``retrieval.evaluation.gate``); None: the KB's active one."""
    result = RunResult(variant)
    if query_ids:
        search(tenant, variant.request(dataset.queries[query_ids[0]], kb.pk), knowledge)
    for qid in query_ids:
        started = time.perf_counter()
        response = search(tenant, variant.request(dataset.queries[qid], kb.pk), knowledge)
        latency_ms = (time.perf_counter() - started) * 1000
        ranking = [corpus_id_from_uri(hit.source_uri) for hit in response.results]
        best: dict[str, float] = {}  # each document of the top 10 at its best chunk, as the metrics rank it
        for corpus_id, hit in zip(ranking, response.results):
            best.setdefault(corpus_id, hit.relevance)
        judgments = dataset.qrels[qid]
        result.judged_relevance[qid] = [(best[doc], judgments.get(doc, 0) > 0) for doc in distinct(ranking)[:10]]
        scores = {name: round(value, 6) for name, value in score_query(ranking, dataset.qrels[qid]).items()}
        result.per_query[qid] = {**scores, "latency_ms": round(latency_ms, 2)}
        result.degraded_queries += bool(response.degraded)
        result.dense_skipped_queries += variant.mode == "hybrid" and response.weights.get("vector", 0) == 0
        on_progress(1)
    return result
