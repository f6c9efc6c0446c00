"""Versions gated on quality: a ready version against the active one, on the KB's query set (nDCG@10
of both through the same ``run_variant`` as ``manage.py evaluate``, the per-query losses) and on the
tenant's recent real queries (the overlap of both versions' top-10 documents; the queries that answer
differently, for review). ``activate: "gated"`` switches only a version that is no worse than the
active one beyond ``KB_VERSION_GATE_NDCG``; without a query set it falls back to the build's own check
(the recent queries answered without error) and says so. The report is kept (``VersionGate``) and can
be read before any manual switch."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from django.conf import settings
from django.db import transaction

from core.usage import frequent_queries
from knowledge.errors import VersionConflict
from knowledge.models import KnowledgeBase, KnowledgeBaseVersion
from knowledge.search_settings import merged_search_settings
from knowledge.selectors.search import SearchedKnowledge, searched_knowledge
from knowledge.versions import VALIDATION_QUERIES, activate_version
from retrieval.evaluation.runs import run_variant
from retrieval.evaluation.variants import DEPTH, Variant
from retrieval.models import JudgedQuery, VersionGate
from retrieval.query_sets import as_dataset
from retrieval.services.search import search
from retrieval.types import SearchRequest

GATE_TASK = "retrieval.tasks.gate_version"
CLIENT_TOP_K = 10
MAX_LISTED = 50  # losses and differing queries listed in a report


def version_knowledge(kb: KnowledgeBase, version: KnowledgeBaseVersion) -> SearchedKnowledge:
    """What a search reads for the KB, with ``version`` in place of its active one."""
    knowledge = searched_knowledge(kb.tenant, [kb.pk])
    [active] = knowledge.versions
    candidate = replace(
        active,
        version_id=version.pk,
        revision=version.revision,
        embedding_model=version.embedding_model,
        embedding_dim=version.embedding_dim,
        languages=tuple(version.languages) or active.languages,
        search_settings=merged_search_settings(kb.search_settings or {}, version.search_settings or {}),
        chunking=version.chunking,
        graph_extractor=version.graph_extractor,
    )
    return replace(knowledge, versions=(candidate,))


def _top_documents(kb: KnowledgeBase, query: str, knowledge: SearchedKnowledge) -> list[str]:
    response = search(kb.tenant, SearchRequest(query=query, top_k=10, kb_ids=[kb.pk]), knowledge)
    return list(dict.fromkeys(hit.source_uri for hit in response.results))


def overlap_on_recent(kb: KnowledgeBase, active: SearchedKnowledge, candidate: SearchedKnowledge) -> dict[str, Any]:
    """Per recent query (the tenant's most frequent): the share of top-10 documents both versions
    return; the mean, and the queries answered differently."""
    rows: list[dict[str, Any]] = []
    for query in frequent_queries(kb.tenant_id, VALIDATION_QUERIES):
        before, after = _top_documents(kb, query, active), _top_documents(kb, query, candidate)
        shared = len(set(before) & set(after)) / max(len(before), len(after), 1)
        rows.append({"query": query, "overlap": round(shared, 4), "only_active": [d for d in before if d not in after],
                     "only_candidate": [d for d in after if d not in before]})  # fmt: skip
    differing = sorted((row for row in rows if row["overlap"] < 1), key=lambda row: row["overlap"])
    return {
        "queries": len(rows),
        "mean_overlap": round(float(np.mean([row["overlap"] for row in rows])), 4) if rows else None,
        "differing": differing[:MAX_LISTED],
    }


def gate_report(kb: KnowledgeBase, version: KnowledgeBaseVersion) -> dict[str, Any]:
    """The comparison of ``version`` with the KB's active version (the module's docstring)."""
    active_version = kb.active_version
    assert active_version is not None, "a gated version is compared with an active one"
    active, candidate = searched_knowledge(kb.tenant, [kb.pk]), version_knowledge(kb, version)
    margin = float(settings.KB_VERSION_GATE_NDCG)
    report: dict[str, Any] = {
        "active_version": active_version.number,
        "version": version.number,
        "margin": margin,
        "overlap": overlap_on_recent(kb, active, candidate),
    }
    dataset = as_dataset(kb)
    if not dataset.qrels:
        return {**report, "query_set": False, "passes": True,
                "reason": "no query set: the version passed the build's check (the tenant's recent queries answered "
                          "without error) and nothing else was measured"}  # fmt: skip
    ids = list(dataset.qrels)
    # What a client is given: ten passages. A version whose pieces crowd other documents out of them
    # (very short chunks) scores lower here, where at a depth of 100 every document would still be found.
    variant = Variant("hybrid", DEPTH, top_k=CLIENT_TOP_K)
    before = run_variant(kb.tenant, kb, dataset, variant, ids, knowledge=active)
    after = run_variant(kb.tenant, kb, dataset, variant, ids, knowledge=candidate)
    ndcg_before = float(np.mean([before.per_query[qid]["ndcg@10"] for qid in ids]))
    ndcg_after = float(np.mean([after.per_query[qid]["ndcg@10"] for qid in ids]))
    texts = dict(JudgedQuery.objects.filter(pk__in=[int(qid) for qid in ids]).values_list("pk", "query"))
    changes: list[dict[str, Any]] = [
        {"query_id": qid, "query": texts.get(int(qid), qid), "active": before.per_query[qid]["ndcg@10"],
         "version": after.per_query[qid]["ndcg@10"],
         "delta": round(after.per_query[qid]["ndcg@10"] - before.per_query[qid]["ndcg@10"], 6)}
        for qid in ids
    ]  # fmt: skip
    losses = sorted((row for row in changes if row["delta"] < 0), key=lambda row: row["delta"])
    passes = ndcg_after >= ndcg_before - margin
    delta = ndcg_after - ndcg_before
    reason = (
        f"nDCG@10 {ndcg_after:.4f} against the active version's {ndcg_before:.4f} ({delta:+.4f}): "
        + ("within" if passes else "below")
        + f" the margin of {margin}"
    )
    return {
        **report,
        "query_set": True,
        "queries": len(ids),
        "ndcg@10": {"active": round(ndcg_before, 4), "version": round(ndcg_after, 4)},
        "passes": passes,
        "reason": reason,
        "wins": sum(row["delta"] > 0 for row in changes),
        "losses": losses[:MAX_LISTED],
        "loss_count": len(losses),
    }


def check_version(kb: KnowledgeBase, version: KnowledgeBaseVersion, *, activate: bool) -> VersionGate:
    """Compare a ready version with the active one and keep the report; with ``activate``, switch to it
    when it passes (else it stays ``ready``)."""
    if version.status != KnowledgeBaseVersion.Status.READY:
        raise VersionConflict(f"version {version.number} is {version.status}: only a ready version is compared")
    report = gate_report(kb, version)
    activated = False
    with transaction.atomic():
        if activate and report["passes"]:
            activate_version(version)
            activated = True
        return VersionGate.objects.create(
            tenant_id=kb.tenant_id, knowledge_base=kb, version_number=version.number,
            active_number=report["active_version"], passes=report["passes"], activated=activated, report=report,
        )  # fmt: skip


def gate_version(version_id: int) -> VersionGate | None:
    """The task's body for a version built with ``activate: "gated"``."""
    version = KnowledgeBaseVersion.objects.select_related("knowledge_base__tenant").filter(pk=version_id).first()
    if version is None or version.status != KnowledgeBaseVersion.Status.READY:
        return None
    kb = KnowledgeBase.objects.select_related("tenant", "active_version").get(pk=version.knowledge_base_id)
    return check_version(kb, version, activate=True)


def latest_gate(kb: KnowledgeBase, number: int) -> VersionGate | None:
    return VersionGate.objects.filter(knowledge_base=kb, tenant_id=kb.tenant_id, version_number=number).first()
