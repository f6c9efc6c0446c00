"""Loopback load test of the service: throughput and p50/p95/p99 for vector, BM25 and hybrid at 1, 4 and
16 concurrent clients, cache-hit latency, error rate.

    .venv/bin/python -m bench.load
    .venv/bin/python -m bench.load --concurrency 1,4,16 --max-requests 200 --max-seconds 20

Small KB: the repo's ``sample_kb/`` ingested with ``call_command("ingest", ...)`` into a throwaway
bench tenant (on its own rate tier with a huge limit, so no 429s). One gunicorn on 127.0.0.1, free
port: ``--config retrieval_site/gunicorn.conf.py --workers 2`` (asyncio workers, model warmed per worker),
result cache ON (production default). Clients: asyncio + one ``httpx.AsyncClient`` per scenario,
N tasks issuing requests back to back; each scenario is bounded by --max-requests and --max-seconds.
Throughput scenarios send real SciFact queries, each text used once in the whole run, so every one is
a cache miss (checked: the ``cached`` flag of each answer is counted). The cache-hit scenario repeats
one identical hybrid request sequentially (after one priming request).
Cleanup (always): stop gunicorn, drop the KB's lexical index, delete the tenant and its tier.
Writes bench/results/load-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import datasets, project, results, server, stats, throwaway


async def run_scenario(base, headers, endpoint, bodies, concurrency, max_requests, max_seconds):
    import httpx

    latencies, statuses, cached = [], {}, 0
    it = iter(bodies)
    issued = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, limits=limits) as client:
        started = time.perf_counter()
        deadline = started + max_seconds

        async def worker():
            nonlocal issued, cached
            while issued < max_requests and time.perf_counter() < deadline:
                issued += 1
                body = next(it)
                t0 = time.perf_counter()
                try:
                    r = await client.post(endpoint, json=body)
                    code = r.status_code
                    if code == 200:
                        cached += bool(r.json().get("cached"))
                except httpx.HTTPError as exc:
                    code = type(exc).__name__
                latencies.append(time.perf_counter() - t0)
                statuses[code] = statuses.get(code, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    n = len(latencies)
    ms = [x * 1000 for x in latencies]
    errors = n - statuses.get(200, 0)
    return {
        "concurrency": concurrency,
        "requests": n,
        "wall_s": round(wall, 2),
        "rps": round(n / wall, 1),
        "p50_ms": round(stats.percentile(ms, 50), 1),
        "p95_ms": round(stats.percentile(ms, 95), 1),
        "p99_ms": round(stats.percentile(ms, 99), 1),
        "max_ms": round(max(ms), 1) if ms else None,
        "errors": errors,
        "error_rate": round(errors / n, 4) if n else None,
        "statuses": {str(k): v for k, v in statuses.items()},
        "cached_answers": cached,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--modes", default="vector,bm25,hybrid")
    parser.add_argument("--max-requests", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=20)
    parser.add_argument("--cache-requests", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--torch-threads", default=None, help="TORCH_THREADS for the server (default: unset = nproc)")
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args()
    project.setup_django()
    import logging

    from django.core.management import call_command
    from django.urls import reverse

    from knowledge.models import KnowledgeBase
    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    levels = [int(x) for x in args.concurrency.split(",")]
    modes = [m.strip() for m in args.modes.split(",")]
    endpoints = {m: reverse(f"retrieval-{m}") for m in modes}
    result = {
        "config": vars(args),
        "machine": results.machine_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    tenant = tier = proc = None
    workdir = Path(tempfile.mkdtemp(prefix="bench-load-"))
    try:
        tenant = create_tenant(results.unique_name("bench-load"))
        tier = throwaway.unlimited_rate_tier(tenant)
        t0 = time.perf_counter()
        call_command(
            "ingest", str(project.REPO_ROOT / "sample_kb"), tenant=tenant.name, kb="load-bench", no_progress=True
        )
        kb = KnowledgeBase.objects.get(tenant=tenant, name="load-bench")
        result["kb"] = {
            "source": "sample_kb/",
            "ingest_s": round(time.perf_counter() - t0, 1),
            "documents": kb.documents.count() if hasattr(kb, "documents") else None,
            "chunks": kb.active_version.chunks.count() if hasattr(kb.active_version, "chunks") else None,
        }
        print(f"ingested sample_kb: {result['kb']}", flush=True)
        headers = {"Authorization": f"Bearer {create_api_key(tenant=tenant, name='bench').raw_key}"}
        _, queries = datasets.scifact_passages_and_queries()
        qiter = iter([f"{q}" for q in queries] + [f"{q} ({i})" for i, q in enumerate(queries * 10)])

        port = server.free_port()
        base = f"http://127.0.0.1:{port}"
        env = {}
        if args.torch_threads:
            env["TORCH_THREADS"] = args.torch_threads
        env["PROMETHEUS_MULTIPROC_DIR"] = str(workdir / "prom")
        (workdir / "prom").mkdir()
        t0 = time.perf_counter()
        proc = server.start_gunicorn(port, workdir / "gunicorn.log", env, workers=args.workers)
        server.wait_ready(proc, base)
        result["gunicorn_ready_s"] = round(time.perf_counter() - t0, 1)

        def bodies():
            while True:
                yield {"query": next(qiter), "top_k": args.top_k}

        # warm-up: a few requests per mode (both workers, DB connections)
        for m in modes:
            asyncio.run(run_scenario(base, headers, endpoints[m], bodies(), 4, 8, 10))
        result["scenarios"] = []
        for c in levels:
            for m in modes:
                load_before = os.getloadavg()[0]
                r = asyncio.run(
                    run_scenario(base, headers, endpoints[m], bodies(), c, args.max_requests, args.max_seconds)
                )
                r.update(mode=m, loadavg_1m_before=round(load_before, 2))
                result["scenarios"].append(r)
                print(
                    f"{m:6s} c={c:2d}: {r['requests']} req {r['rps']} req/s p50 {r['p50_ms']} p95 {r['p95_ms']} "
                    f"p99 {r['p99_ms']} errors {r['errors']} cached {r['cached_answers']} load {load_before:.2f}",
                    flush=True,
                )

        def same():
            while True:
                yield {"query": "How should I store the lithium battery pack?", "top_k": args.top_k}

        for m in ("hybrid", "bm25"):
            prime = asyncio.run(run_scenario(base, headers, endpoints[m], same(), 1, 1, 30))
            r = asyncio.run(run_scenario(base, headers, endpoints[m], same(), 1, args.cache_requests, args.max_seconds))
            r.update(
                mode=f"{m} cache hit", first_request_ms=prime["p50_ms"], loadavg_1m_before=round(os.getloadavg()[0], 2)
            )
            result["scenarios"].append(r)
            print(
                f"cache hit {m}: first {prime['p50_ms']} ms, then p50 {r['p50_ms']} p95 {r['p95_ms']} p99 {r['p99_ms']} "
                f"cached {r['cached_answers']}/{r['requests']}",
                flush=True,
            )
        return 0
    finally:
        if proc is not None:
            server.stop_process(proc)
        cleanup = throwaway.clean_up(result, tenant, tier, tenant_prefix="bench-load")
        path = results.write_result("load", result)
        print(f"cleanup {cleanup}; wrote {path}")
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
