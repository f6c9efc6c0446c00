"""Reports: everything needed to reproduce and compare a run, and the comparison of two reports."""

from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from engines.embedders import get_embedder
from knowledge.ingestion.pipeline import IngestReport
from knowledge.models import KnowledgeBase
from knowledge.selectors.api import search_settings_of
from knowledge.selectors.search import analyzer_for_tenant
from retrieval.evaluation.datasets import BeirDataset
from retrieval.evaluation.metrics import METRICS
from retrieval.evaluation.runs import RunResult
from retrieval.evaluation.variants import DEPTH
from retrieval.types import MODES


def git_commit() -> str | None:
    """The checked-out commit, read from ``.git`` directly (no git binary needed). In a linked worktree
    ``.git`` is a file naming the worktree's own git dir (its HEAD), whose ``commondir`` holds the refs."""
    git_dir = Path(settings.BASE_DIR) / ".git"
    if git_dir.is_file():
        git_dir = git_dir.parent / git_dir.read_text().strip().removeprefix("gitdir: ")
    if not (git_dir / "HEAD").is_file():
        return None
    head = (git_dir / "HEAD").read_text().strip()
    if not head.startswith("ref: "):
        return head
    ref = head.removeprefix("ref: ")
    common = git_dir / (git_dir / "commondir").read_text().strip() if (git_dir / "commondir").is_file() else git_dir
    for refs_dir in (git_dir, common):
        if (refs_dir / ref).is_file():
            return (refs_dir / ref).read_text().strip()
    packed = common / "packed-refs"
    for line in packed.read_text().splitlines() if packed.is_file() else []:
        if line.endswith(f" {ref}"):
            return line.split(" ", 1)[0]
    return None


def build_report(
    dataset: BeirDataset,
    kb: KnowledgeBase,
    results: list[RunResult],
    ingestion: IngestReport | None,
    *,
    command: str | None,
    commit: str | None,
) -> dict[str, Any]:
    """Everything needed to reproduce and compare a run: settings, model, analyzer, commit (read when
    the run started: the code it imported), scores."""
    embedder = get_embedder(kb.embedding_model)
    return {
        "created_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "dataset": {
            "name": dataset.name,
            "path": str(dataset.path),
            "split": dataset.split,
            "corpus_sha256": dataset.corpus_sha256,
            "documents": len(dataset.corpus) if dataset.corpus else None,  # None: the KB's own documents
            "judged_queries": len(dataset.qrels),
            "judged_docs_missing_from_corpus": dataset.missing_judged_docs if dataset.corpus else None,
        },
        "knowledge_base": {
            "tenant": kb.tenant.name,
            "name": kb.name,
            "search_settings": search_settings_of(kb),
            "chunk_size": kb.chunk_size,
            "chunk_overlap": kb.chunk_overlap,
            "chunking": kb.chunking,
            "parent_chunk_size": kb.parent_chunk_size,
            "languages": kb.languages,
        },
        "model": {"name": kb.embedding_model, "dimension": embedder.dimension, "max_tokens": embedder.max_tokens},
        "analyzer_version": analyzer_for_tenant(kb.tenant_id).version,
        "settings": {
            "top_k": DEPTH,
            "RRF_K": settings.RRF_K,
            "SEARCH_CANDIDATES": settings.SEARCH_CANDIDATES,
            "SEARCH_WEIGHTS": settings.SEARCH_WEIGHTS,
            "SEARCH_WEIGHT_GRAPH_HYBRID": settings.SEARCH_WEIGHT_GRAPH_HYBRID,
            "GRAPH_FUSION_HEAD": settings.GRAPH_FUSION_HEAD,
            "DENSE_WEIGHT_FLOOR": settings.DENSE_WEIGHT_FLOOR,
            "EMBEDDING_BATCH_SIZE": settings.EMBEDDING_BATCH_SIZE,
            "TORCH_THREADS": settings.TORCH_THREADS,
            "EMBEDDING_BACKEND": settings.EMBEDDING_BACKEND,
            "ONNX_THREADS": settings.ONNX_THREADS,
        },
        "ingestion": None
        if ingestion is None
        else {
            **ingestion.as_dict(),
            "chunks_per_s": round(ingestion.chunks / ingestion.seconds, 2) if ingestion.chunks else None,
        },
        "runs": [result.as_dict() for result in results],
    }


def _paired_runs(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Runs with the same label; then a mode's one leftover run before against each leftover run of
    that mode after (a baseline against a sweep, or reports labelled before and after a change of
    defaults)."""
    earlier = {run["label"]: run for run in before["runs"]}
    pairs = [(earlier.pop(run["label"]), run) for run in after["runs"] if run["label"] in earlier]
    paired = {id(run) for _, run in pairs}
    for mode in MODES:
        left = [run for run in earlier.values() if run["mode"] == mode]
        if len(left) == 1:
            pairs += [(left[0], run) for run in after["runs"] if run["mode"] == mode and id(run) not in paired]
    return pairs


def compare_reports(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pair of runs, each metric's mean over the queries both runs scored and its delta (after -
    before), and how many of those queries got a better or worse nDCG@10."""
    rows = []
    for base, run in _paired_runs(before, after):
        shared = sorted(base["per_query"].keys() & run["per_query"].keys())
        if not shared:
            continue
        means = [
            {metric: float(np.mean([side["per_query"][q][metric] for q in shared])) for metric in METRICS}
            for side in (base, run)
        ]
        change = [run["per_query"][q]["ndcg@10"] - base["per_query"][q]["ndcg@10"] for q in shared]
        rows.append(
            {
                "label": run["label"] if run["label"] == base["label"] else f"{base['label']} -> {run['label']}",
                "queries": len(shared),
                "before": {metric: round(value, 4) for metric, value in means[0].items()},
                "after": {metric: round(value, 4) for metric, value in means[1].items()},
                "delta": {metric: round(means[1][metric] - means[0][metric], 4) for metric in METRICS},
                "latency_p50_delta_ms": round(run["latency_ms"]["p50"] - base["latency_ms"]["p50"], 2),
                "ndcg@10_better": sum(1 for d in change if d > 1e-9),
                "ndcg@10_worse": sum(1 for d in change if d < -1e-9),
            }
        )
    return rows
