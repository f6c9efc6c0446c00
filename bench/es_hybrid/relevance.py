"""nDCG@10 on the shared sets: the service's default hybrid (``retrieval.evaluation``, the evaluation
KB ``manage.py evaluate`` builds, ingested here when missing) against Elasticsearch's hybrid forms on the
same chunks and vectors. Both rank chunks; a document ranks at its best chunk (``metrics.distinct``), and
each side is asked for the evaluation's depth of hits (``variants.DEPTH``), so both score ten documents."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import Any

from bench.es_hybrid import chunks
from bench.es_hybrid.es import EsHybrid, build_index
from bench.harness import datasets


def subset(dataset: Any, query_ids: list[str], corpus_limit: int) -> Any:
    """A small corpus for a smoke run: the judged documents of ``query_ids`` and the first others, up to
    ``corpus_limit``; its own digest, so it gets its own evaluation KB."""
    keep = [doc for qid in query_ids for doc in dataset.qrels[qid] if doc in dataset.corpus]
    keep += [doc for doc in dataset.corpus if doc not in keep][: max(0, corpus_limit - len(keep))]
    corpus = {doc: dataset.corpus[doc] for doc in dict.fromkeys(keep)}
    digest = hashlib.sha256(json.dumps([dataset.corpus_sha256, sorted(corpus)]).encode()).hexdigest()
    qrels = {qid: dataset.qrels[qid] for qid in query_ids}
    return replace(dataset, corpus=corpus, corpus_sha256=digest, qrels=qrels)


def evaluation_kb(dataset: Any) -> tuple[Any, dict[str, Any]]:
    """The dataset's evaluation KB with the default model, as ``manage.py evaluate`` builds it."""
    from django.conf import settings

    from retrieval.evaluation.datasets import corpus_files
    from retrieval.evaluation.knowledge_bases import KbSettings, eval_knowledge_base, ingest_corpus

    kb, created = eval_knowledge_base(dataset, KbSettings(model=settings.EMBEDDING_MODEL))
    started = time.perf_counter()
    report = ingest_corpus(kb, corpus_files(dataset), lambda done: None)
    kb.refresh_from_db()
    return kb, {"kb": kb.name, "created": created, "ingest_s": round(time.perf_counter() - started, 1),
                "chunks": report.as_dict().get("chunks")}  # fmt: skip


def compare(
    name: str, split: str, client: Any, forms: list[str], *, limit: int, corpus_limit: int, vector_index: str,
    num_candidates: int,
) -> dict[str, Any]:  # fmt: skip
    from engines.embedders import get_embedder
    from knowledge.selectors.search import analyzer_for_tenant
    from retrieval.evaluation.datasets import corpus_id_from_uri, load_dataset
    from retrieval.evaluation.metrics import score_query
    from retrieval.evaluation.runs import run_variant
    from retrieval.evaluation.variants import DEPTH, build_variants

    dataset = load_dataset(datasets.DATASETS_DIR / name, split)
    query_ids = list(dataset.qrels)[:limit] if limit else list(dataset.qrels)
    if corpus_limit:
        dataset = subset(dataset, query_ids, corpus_limit)
    kb, built = evaluation_kb(dataset)
    version = kb.active_version
    variant = build_variants(["hybrid"], candidates=[DEPTH])[0]
    service = run_variant(kb.tenant, kb, dataset, variant, query_ids)
    ndcg: dict[str, list[float]] = {"service_hybrid": [q["ndcg@10"] for q in service.per_query.values()]}

    index = f"bench-es-hybrid-{name}".lower()
    started = time.perf_counter()
    try:
        count = build_index(client, index, chunks.version_entries(version), version.embedding_dim, vector_index)
        indexed_s = time.perf_counter() - started
        uris = chunks.source_uris(version)
        es = EsHybrid(
            client, index, get_embedder(version.embedding_model), analyzer_for_tenant(kb.tenant_id),
            num_candidates=num_candidates,
        )  # fmt: skip
        for form in forms:
            ndcg[form] = []
            for qid in query_ids:
                hits = es.search(form, dataset.queries[qid], variant.top_k)
                ranking = [corpus_id_from_uri(uris[chunk_id]) for chunk_id in hits]
                ndcg[form].append(score_query(ranking, dataset.qrels[qid])["ndcg@10"])
    finally:
        client.options(ignore_status=404).indices.delete(index=index)
    return {
        "set": f"{name} ({split})",
        "queries": len(query_ids),
        "corpus_documents": len(dataset.corpus),
        "chunks": count,
        "es_index_s": round(indexed_s, 1),
        "size": variant.top_k,
        "service_degraded_queries": service.degraded_queries,
        **built,
        "ndcg@10": {form: round(sum(values) / len(values), 4) for form, values in ndcg.items() if values},
    }
