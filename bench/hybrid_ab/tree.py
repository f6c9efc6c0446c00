"""The steps of ``bench.hybrid_ab`` that run inside one tree: a subprocess of that tree's interpreter runs
``python -m bench.hybrid_ab --in-tree <tree> --step ...`` from this checkout, which imports the tree's
project code (``prepare`` its data, ``floor`` its raw engine calls, ``cleanup``). Older trees' import
paths are tried where the code moved; the rows are written by ``bench.synthetic`` through the tree's
``knowledge.ingestion.chunk_rows``."""

from __future__ import annotations

import time
from pathlib import Path

from bench import synthetic
from bench.harness import datasets, project, results, throwaway


def _ensure_hnsw() -> None:
    try:
        from knowledge.stores import vector_index
    except ImportError:  # older trees
        from knowledge.services import ensure_vector_index

        ensure_vector_index(384)
    else:
        vector_index().ensure_index(384)


def prepare(tree: Path, chunks: int, docs: int, seed: int, embedding_model: str) -> dict:
    import numpy as np

    project.setup_django(code=tree)
    from django.db import connection

    try:
        from knowledge.knowledge_bases import create_knowledge_base
        from knowledge.lexical import rebuild_lexical_index
    except ImportError:  # older trees
        from knowledge.services import create_knowledge_base, rebuild_lexical_index
    from tenants.services import create_api_key, create_tenant

    try:
        from engines.embedders import get_embedder
    except ImportError:  # older trees
        from retrieval.embedders import get_embedder

    passages, queries = datasets.scifact_passages_and_queries()
    real, _, _ = datasets.embedded_passages(get_embedder(), passages, cache=True)
    vectors, main_component = synthetic.synthesize(real, chunks, np.random.default_rng(seed))
    tenant = create_tenant(results.unique_name("bench-ab"))
    tier = throwaway.unlimited_rate_tier(tenant)
    kb = create_knowledge_base(tenant=tenant, name="ab-bench", embedding_model=embedding_model or None)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX IF EXISTS {synthetic.INDEX_NAME}")
    try:
        synthetic.load_synthetic_documents(kb, passages, vectors, main_component, docs)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('maintenance_work_mem', '1GB', false)")
        _ensure_hnsw()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE knowledge_chunk")
        cursor.execute("ANALYZE knowledge_document")
    rebuild_lexical_index(kb.active_version)
    key = create_api_key(tenant=tenant, name="bench").raw_key
    return {"tenant": tenant.pk, "tier": tier.pk if tier else None, "key": key}


def cleanup(tree: Path, state: dict) -> dict:
    project.setup_django(code=tree)
    from tenants.models import RateTier, Tenant

    tenant = Tenant.objects.filter(pk=state["tenant"]).first()
    tier = RateTier.objects.filter(pk=state["tier"]).first() if state.get("tier") else None
    return throwaway.clean_up({}, tenant, tier, tenant_prefix="bench-ab")


def floor(tree: Path, state: dict, count: int) -> dict:
    """The physical floor in this tree's process: the raw engine calls of a hybrid search (embed the
    query with the configured embedder, pgvector at SEARCH_CANDIDATES, tantivy with the analyzer's
    tokens, RRF), p50 each and of their sum, over ``count`` SciFact queries. Needs the current API."""
    import statistics

    project.setup_django(code=tree)
    from django.conf import settings

    from engines import get_lexical_index
    from engines.base import SearchScope
    from engines.embedders import get_embedder
    from knowledge.models import KnowledgeBase
    from knowledge.selectors.search import analyzer_for_tenant
    from knowledge.stores import vector_index
    from retrieval.filters import compile_filters
    from retrieval.fusion_functions import RankedList, reciprocal_rank_fusion

    version = KnowledgeBase.objects.get(tenant_id=state["tenant"]).active_version
    scope = SearchScope(state["tenant"], (version.pk,), version.embedding_dim)
    embedder, vectors, lexical = get_embedder(version.embedding_model), vector_index(), get_lexical_index()
    analyzer, depth, no_filter = (
        analyzer_for_tenant(state["tenant"]),
        settings.SEARCH_CANDIDATES,
        compile_filters(None).sql,
    )
    _, queries = datasets.scifact_passages_and_queries()
    times: dict[str, list[float]] = {name: [] for name in ("embed", "vector", "bm25", "rrf", "sum")}
    for i, query in enumerate(queries[-10:] + queries[:count]):
        t0 = time.perf_counter()
        vector = embedder.embed_query(query)
        t1 = time.perf_counter()
        dense = vectors.search(scope, vector, depth, no_filter)
        t2 = time.perf_counter()
        keyword = lexical.search(version.pk, state["tenant"], analyzer.tokens(query), depth, None)
        t3 = time.perf_counter()
        reciprocal_rank_fusion(
            [
                RankedList("vector", query, 1.0, [(h.chunk_id, h.score) for h in dense]),
                RankedList("bm25", query, 1.0, [(h.chunk_id, h.score) for h in keyword]),
            ]
        )
        t4 = time.perf_counter()
        if i >= 10:  # the first ten warm up
            for name, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                times[name].append(seconds * 1000)
    return {
        "embedder": embedder.model_name,
        "backend": settings.EMBEDDING_BACKEND,
        **{f"{name}_p50_ms": round(statistics.median(values), 2) for name, values in times.items()},
    }
