"""Latency and throughput at scale: the synthetic rows of ``bench.hybrid_ab`` (real SciFact passages
and vectors mixed into ``rows`` chunks) served by the service's gunicorn (``/api/v1/retrieval/hybrid``,
pgvector + tantivy, result cache off) and the same rows in Elasticsearch, called over its HTTP by the
Python client with the query embedded in this process by the same model, as a client of it would.
Sequential latency takes each query to every scenario in turn (the order rotating), so a burst of other
load hits each alike; throughput runs ``clients`` closed-loop threads per scenario, every request a text
that scenario was not sent before."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.es_hybrid import chunks
from bench.es_hybrid.es import EsHybrid, build_index
from bench.harness import datasets, project, server, stats

SERVICE = "service_hybrid"


def measure(client: Any, forms: list[str], args: Any) -> dict[str, Any]:
    """Loads the rows, times every scenario, and always removes the rows, the index and the server."""
    import httpx
    from django.test import override_settings

    from bench.hybrid_ab import tree
    from engines import embedders
    from knowledge.models import KnowledgeBase
    from knowledge.selectors.search import analyzer_for_tenant

    out: dict[str, Any] = {"rows": args.rows, "top_k": args.top_k, "clients": args.clients}
    started = time.perf_counter()
    state = tree.prepare(project.REPO_ROOT, args.rows, args.docs, args.seed, "")
    out["service_load_s"] = round(time.perf_counter() - started, 1)
    index = "bench-es-hybrid-scale"
    proc = None
    try:
        kb = KnowledgeBase.objects.get(tenant_id=state["tenant"])
        version = kb.active_version
        started = time.perf_counter()
        out["es_documents"] = build_index(
            client, index, chunks.version_entries(version), version.embedding_dim, args.vector_index
        )
        out["es_load_s"] = round(time.perf_counter() - started, 1)
        # The client's own model, on one thread per query as the server's (TORCH_THREADS=1 below): not the
        # process's cached one, which ingestion made with every core.
        with override_settings(TORCH_THREADS=1, ONNX_THREADS=1):
            query_embedder = embedders._load(version.embedding_model)
        es = EsHybrid(
            client, index, query_embedder, analyzer_for_tenant(kb.tenant_id),
            num_candidates=args.num_candidates,
        )  # fmt: skip
        port = server.free_port()
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"es_hybrid-gunicorn-{os.getpid()}.log"
        env = {"TORCH_THREADS": "1", "LC_ALL": "C.UTF-8", "SEARCH_CACHE_TTL_S": "0", "WEB_THREADS": str(args.threads)}
        proc = server.start_gunicorn(port, log, env, workers=args.workers)
        base = f"http://127.0.0.1:{port}"
        server.wait_ready(proc, base)
        http = httpx.Client(
            base_url=base, timeout=60, headers={"Authorization": f"Bearer {state['key']}"},
            limits=httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients),
        )  # fmt: skip

        def service(text: str) -> None:
            response = http.post("/api/v1/retrieval/hybrid", json={"query": text, "top_k": args.top_k, "rerank": False})
            if response.status_code != 200:
                raise RuntimeError(f"service: HTTP {response.status_code} {response.text[:300]}")

        calls: dict[str, Callable[[str], object]] = {SERVICE: service}
        for form in forms:
            calls[form] = lambda text, form=form: es.search(form, text, args.top_k, args.window or None)
        passages, queries = datasets.scifact_passages_and_queries()
        out["latency"] = sequential(calls, queries, args.requests, args.warmup)
        if args.throughput_s > 0:
            texts = list(dict.fromkeys(" ".join(passage.split()[:12]) for passage in passages))
            out["throughput"] = throughput(calls, texts, args.clients, args.throughput_s)
        out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        http.close()
        return out
    finally:
        if proc is not None:
            server.stop_process(proc)
        client.options(ignore_status=404).indices.delete(index=index)
        out["cleanup"] = tree.cleanup(project.REPO_ROOT, state)


def sequential(calls: dict[str, Callable[[str], object]], queries: list[str], requests: int, warmup: int) -> dict:
    """p50/p95 of each scenario, one client: every query to each scenario in turn, the order rotating."""
    names = list(calls)
    for query in queries[-warmup:] if warmup else []:
        for name in names:
            calls[name](query)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for i, query in enumerate(queries[:requests]):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            started = time.perf_counter()
            calls[name](query)
            seconds[name].append(time.perf_counter() - started)
    return {name: stats.summarize_ms(values) for name, values in seconds.items()}


def throughput(calls: dict[str, Callable[[str], object]], texts: list[str], clients: int, seconds: float) -> dict:
    """Requests per second of ``clients`` threads calling back to back, each scenario in turn in four
    slices of ``seconds / 4`` (so each sees the machine's load over the same stretch of time); a failed
    request is counted in ``errors``, not in the rate."""
    done = {name: [0, 0.0] for name in calls}
    sent = {name: iter(range(10**9)) for name in calls}
    errors: dict[str, int] = {}
    first_error: dict[str, str] = {}
    lock = threading.Lock()
    for round_ in range(4):
        order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
        for name in order:
            stop = time.perf_counter() + seconds / 4
            count = [0]

            def loop(name: str = name, stop: float = stop, count: list[int] = count) -> None:
                while time.perf_counter() < stop:
                    with lock:
                        text = texts[next(sent[name]) % len(texts)]
                    try:
                        calls[name](text)
                    except Exception as exc:  # counted, not a completed request; the first one is kept
                        with lock:
                            errors[name] = errors.get(name, 0) + 1
                            first_error.setdefault(name, repr(exc)[:300])
                        continue
                    with lock:
                        count[0] += 1

            started = time.perf_counter()
            threads = [threading.Thread(target=loop) for _ in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            done[name][0] += count[0]
            done[name][1] += time.perf_counter() - started
    rps = {name: round(n / s, 1) for name, (n, s) in done.items()}
    return {"rps": rps, "errors": errors, "first_error": first_error}
