"""Evaluation runs of a tenant's knowledge base on its query set (``retrieval.query_sets``): the same
``run_variant`` as ``manage.py evaluate --tenant`` (nDCG@10, recall@10, MRR@10, latency, the
threshold curve), run by a Celery task that counts its progress on the ``EvaluationRun`` row, plus the
share of judged-relevant top-10 hits the KB's ``relevance`` threshold keeps. A run is kept with the
settings it searched with and the version and revision it scored."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from core.errors import ConflictError, NotFoundError
from knowledge.knowledge_bases import update_search_settings
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion
from knowledge.search_settings import FUSIONS
from retrieval.errors import InvalidQuerySet
from retrieval.evaluation.gate import version_knowledge
from retrieval.evaluation.metrics import kept_share
from retrieval.evaluation.runs import run_variant
from retrieval.evaluation.variants import DEPTH, Variant
from retrieval.models import EvaluationRun, JudgedQuery
from retrieval.query_sets import as_dataset
from retrieval.types import MODES

EVALUATE_TASK = "retrieval.tasks.evaluate_knowledge_base"
# A KB's relevance threshold when it sets none (``search_settings.score_threshold``): the bound the
# search analytics call a weak answer (``retrieval.analytics_console``).
FALLBACK_THRESHOLD = 0.13
SETTING_KEYS = ("mode", "fusion", "weights", "rerank", "candidates", "rrf_k", "version")


# A version a run can score besides the active one: any that still holds its indexes.
SCORABLE = (KnowledgeBaseVersion.Status.READY, KnowledgeBaseVersion.Status.ACTIVE, KnowledgeBaseVersion.Status.RETIRED)


class EmptyQuerySet(ConflictError):
    """409: the KB's query set has no query with a relevant judgment, so a run could score nothing."""

    code = "empty_query_set"


class EvaluationRunNotFound(NotFoundError):
    code = "evaluation_run_not_found"


def relevance_threshold_of(kb: KnowledgeBase) -> float:
    """The threshold a client of this KB filters on: its default ``score_threshold``, else the fallback."""
    value = (kb.search_settings or {}).get("score_threshold")
    return float(value) if isinstance(value, int | float) else FALLBACK_THRESHOLD


def clean_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The candidate settings a run searches with (blank keys: the KB's and service defaults)."""
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise InvalidQuerySet(f"unknown run settings: {', '.join(unknown)}", details={"fields": unknown})
    mode = settings.get("mode") or "hybrid"
    if mode not in MODES:
        raise InvalidQuerySet(f"mode is one of {', '.join(MODES)}", details={"field": "mode"})
    fusion = settings.get("fusion") or None
    if fusion is not None and fusion not in FUSIONS:
        raise InvalidQuerySet(f"fusion is one of {', '.join(FUSIONS)}", details={"field": "fusion"})
    weights = settings.get("weights") or None
    if weights is not None and (
        not isinstance(weights, dict)
        or not all(isinstance(v, int | float) and 0 <= v <= 100 for v in weights.values())
        or not set(weights) <= {"vector", "bm25", "graph"}
    ):
        raise InvalidQuerySet("weights: {vector|bm25|graph: 0..100}", details={"field": "weights"})
    candidates = settings.get("candidates") or DEPTH
    if not isinstance(candidates, int) or not DEPTH <= candidates <= 200:
        raise InvalidQuerySet(
            f"candidates: {DEPTH}..200 (a run asks for {DEPTH} results)", details={"field": "candidates"}
        )
    rrf_k = settings.get("rrf_k") or None
    if rrf_k is not None and (not isinstance(rrf_k, int) or not 1 <= rrf_k <= 1000):
        raise InvalidQuerySet("rrf_k: 1..1000", details={"field": "rrf_k"})
    version = settings.get("version") or None
    if version is not None and (not isinstance(version, int) or version < 1):
        raise InvalidQuerySet("version: a version number of the knowledge base", details={"field": "version"})
    return {
        "version": version,
        "mode": mode,
        "fusion": fusion,
        "weights": weights,
        "rerank": bool(settings.get("rerank")),
        "candidates": candidates,
        "rrf_k": rrf_k,
    }


def variant_of(settings: dict[str, Any]) -> Variant:
    weights = tuple(sorted(settings["weights"].items())) if settings.get("weights") else None
    return Variant(
        settings["mode"],
        settings.get("candidates") or DEPTH,
        weights=weights,
        rrf_k=settings.get("rrf_k"),
        rerank=bool(settings.get("rerank")),
        fusion=settings.get("fusion"),
    )


# --- reads ----------------------------------------------------------------------------------------


def runs_of(kb: KnowledgeBase) -> QuerySet[EvaluationRun]:
    return EvaluationRun.objects.filter(knowledge_base=kb, tenant_id=kb.tenant_id).order_by("-created_at", "-id")


def run_of(kb: KnowledgeBase, run_id: int) -> EvaluationRun:
    """One of the KB's runs; another KB's answers like a missing one."""
    run = runs_of(kb).filter(pk=run_id).first()
    if run is None:
        raise EvaluationRunNotFound(f"unknown evaluation run id: {run_id}", details={"run_id": run_id})
    return run


def ndcg_history(kb: KnowledgeBase, limit: int = 50) -> list[EvaluationRun]:
    """The KB's finished runs, oldest first (what the history chart draws)."""
    return list(reversed(runs_of(kb).filter(status=EvaluationRun.Status.DONE)[:limit]))


def wins_and_losses(before: EvaluationRun, after: EvaluationRun) -> list[dict[str, Any]]:
    """Per query both runs scored: nDCG@10 before and after and the change, largest loss first; the
    query's text as the set holds it now (a query removed since: its id)."""
    shared = [qid for qid in after.per_query if qid in before.per_query]
    texts = dict(
        JudgedQuery.objects.filter(pk__in=[int(qid) for qid in shared if qid.isdigit()]).values_list("pk", "query")
    )
    rows = []
    for qid in shared:
        a, b = before.per_query[qid]["ndcg@10"], after.per_query[qid]["ndcg@10"]
        rows.append(
            {"query_id": qid, "query": texts.get(int(qid), qid) if qid.isdigit() else qid,
             "before": a, "after": b, "delta": round(b - a, 6)}
        )  # fmt: skip
    return sorted(rows, key=lambda row: (row["delta"], row["query_id"]))


def make_threshold_default(run: EvaluationRun) -> float:
    """Store the run's recommended threshold (keeping 90 % of the judged-relevant top-10 hits) as the KB's
    default ``score_threshold``, what Dify's retrieval applies when Dify sends none."""
    kb = run.knowledge_base
    recommended = ((run.summary or {}).get("relevance_threshold") or {}).get("threshold_keeping_90")
    if recommended is None:
        raise InvalidQuerySet(
            "this run recommends no threshold: its top-10 hits held no judged-relevant one", details={"run_id": run.pk}
        )
    update_search_settings(kb, {**(kb.search_settings or {}), "score_threshold": recommended})
    return float(recommended)


# --- writes ---------------------------------------------------------------------------------------


def start_evaluation(kb: KnowledgeBase, settings: dict[str, Any]) -> EvaluationRun:
    """Record a run of the KB's active version (or of ``settings["version"]``, a ready or retired one) on
    its query set and queue it once the row commits."""
    cleaned = clean_settings(settings)
    dataset = as_dataset(kb)
    if not dataset.qrels:
        raise EmptyQuerySet(
            "the knowledge base's query set has no query with a relevant judgment: judge hits in the console's "
            "retrieval testing or import a set first",
            details={"kb_id": kb.pk},
        )
    version = kb.active_version
    if cleaned["version"] is not None and (version is None or cleaned["version"] != version.number):
        version = kb.versions.filter(number=cleaned["version"]).first()
        if version is None or version.status not in SCORABLE:
            raise InvalidQuerySet(
                f"version {cleaned['version']} is not a ready, active or retired version of this knowledge base",
                details={"field": "version"},
            )
    with transaction.atomic():
        run = EvaluationRun.objects.create(
            tenant_id=kb.tenant_id,
            knowledge_base=kb,
            version_number=version.number if version else None,
            revision=version.revision if version else None,
            settings=cleaned,
            total=len(dataset.qrels),
        )
        transaction.on_commit(lambda: current_app.send_task(EVALUATE_TASK, (run.pk,)))
    return run


def execute_evaluation(run_id: int) -> EvaluationRun | None:
    """The task's body: every judged query through ``search``, then the run's summary (a failure is kept
    on the run, with its message)."""
    run = (
        EvaluationRun.objects.select_related("knowledge_base__tenant", "knowledge_base__active_version")
        .filter(pk=run_id)
        .first()
    )
    if run is None or run.status != EvaluationRun.Status.QUEUED:
        return run
    kb = run.knowledge_base
    EvaluationRun.objects.filter(pk=run.pk).update(status=EvaluationRun.Status.RUNNING)
    try:
        dataset = as_dataset(kb)
        query_ids = list(dataset.qrels)
        EvaluationRun.objects.filter(pk=run.pk).update(total=len(query_ids))

        def progress(done: int) -> None:
            EvaluationRun.objects.filter(pk=run.pk).update(done=F("done") + done)

        knowledge = None  # the active version
        if run.version_number is not None and (
            kb.active_version is None or run.version_number != kb.active_version.number
        ):
            knowledge = version_knowledge(kb, kb.versions.get(number=run.version_number))
        result = run_variant(kb.tenant, kb, dataset, variant_of(run.settings), query_ids, progress, knowledge)
        summary = result.summary()
        threshold = relevance_threshold_of(kb)
        relevant = [score for score, judged in result.judged() if judged]
        share = kept_share(relevant, threshold)
        summary["kb_threshold"] = {"threshold": threshold, "relevant_kept": None if share is None else round(share, 4)}
        EvaluationRun.objects.filter(pk=run.pk).update(
            status=EvaluationRun.Status.DONE, summary=summary, per_query=result.per_query, finished_at=timezone.now()
        )
    except Exception as exc:  # kept on the run for the curator; the worker logs the traceback
        EvaluationRun.objects.filter(pk=run.pk).update(
            status=EvaluationRun.Status.FAILED, error=f"{type(exc).__name__}: {exc}", finished_at=timezone.now()
        )
        raise
    run.refresh_from_db()
    return run
