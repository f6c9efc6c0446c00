"""Slow clients: the threaded WSGI worker (the server before its asyncio worker) against the asyncio worker that ``./run serve``
starts, both up at once and measured in alternation. Current figures: docs/BENCHMARKS.md, "Slow clients".

    .venv/bin/python -m bench.slow_clients --rounds 5 --requests 40

The sample KB in a throwaway tenant; one worker per server, result cache off. Per round and server:
``quiet`` sends sequential ``GET /health`` and ``POST /hybrid`` requests on new connections; ``slow`` sends
the same while ``--drippers`` connections each promise a 100-byte body and send one byte every 0.5 s. A
request unanswered within ``--request-timeout-s`` is a timeout; a scenario stops at its third. Cleanup
(always): servers stopped, tenant and tier deleted. Writes bench/results/slow_clients-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import datasets, project, results, server, stats, tables, throwaway

GIVE_UP_AFTER_TIMEOUTS = 3  # a stuck server is stuck: stop the scenario there
SERVERS = {
    "before (gthread 1x4, WSGI)": (("retrieval_site.wsgi:application", "-k", "gthread", "--threads", "4"), {}),
    "after (asyncio + WSGI on 4 threads)": ((), {}),
}


async def drip(port: int, key: str, stop: asyncio.Event) -> None:
    """One slow client: a search whose 100-byte body arrives a byte every 0.5 s (never completes here)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    head = (
        f"POST /api/v1/retrieval/hybrid HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    try:
        writer.write(head.encode())
        while not stop.is_set():
            await writer.drain()
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except TimeoutError:
                writer.write(b" ")
    except OSError:
        pass
    finally:
        writer.close()


async def timed_requests(port, key, queries, n, timeout_s):
    """``n`` health checks and ``n`` hybrid searches, alternating, each on a new connection."""
    import httpx

    out = {"health": [], "hybrid": [], "timeouts": {"health": 0, "hybrid": 0}, "errors": 0}
    headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout_s, headers=headers) as client:
        for _ in range(n):
            for name, call in (
                ("health", lambda: client.get("/health")),
                ("hybrid", lambda: client.post("/api/v1/retrieval/hybrid", json={"query": next(queries), "top_k": 10})),
            ):
                if sum(out["timeouts"].values()) >= GIVE_UP_AFTER_TIMEOUTS:
                    return out
                started = time.perf_counter()
                try:
                    response = await call()
                except httpx.TimeoutException:
                    out["timeouts"][name] += 1
                    continue
                if response.status_code != 200:
                    out["errors"] += 1
                    continue
                out[name].append(time.perf_counter() - started)
    return out


async def scenario(port, key, queries, n, drippers, timeout_s):
    stop = asyncio.Event()
    tasks = [asyncio.create_task(drip(port, key, stop)) for _ in range(drippers)]
    if drippers:
        await asyncio.sleep(2.0)  # every slow client connected and a few bytes in
    try:
        return await timed_requests(port, key, queries, n, timeout_s)
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30, help="health checks and searches per scenario")
    parser.add_argument("--drippers", type=int, default=50)
    parser.add_argument("--request-timeout-s", type=float, default=5.0)
    args = parser.parse_args()
    project.setup_django()
    import logging

    from django.core.management import call_command

    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    result = {
        "config": vars(args),
        "machine": results.machine_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "runs": [],
    }
    tenant = tier = None
    procs = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench-slow-"))
    try:
        tenant = create_tenant(results.unique_name("bench-slow"))
        tier = throwaway.unlimited_rate_tier(tenant)
        call_command(
            "ingest", str(project.REPO_ROOT / "sample_kb"), tenant=tenant.name, kb="slow-bench", no_progress=True
        )
        key = create_api_key(tenant=tenant, name="bench").raw_key
        _, texts = datasets.scifact_passages_and_queries()
        queries = iter([f"{q} ({i})" for i, q in enumerate(texts * 20)])
        ports = {}
        for name, (server_args, env) in SERVERS.items():
            ports[name] = server.free_port()
            procs[name] = server.start_gunicorn(
                ports[name], workdir / f"{len(procs)}.log", {"SEARCH_CACHE_TTL_S": "0", **env}, extra_args=server_args
            )
        for name, proc in procs.items():
            server.wait_ready(proc, f"http://127.0.0.1:{ports[name]}")
            asyncio.run(timed_requests(ports[name], key, queries, 5, 30))  # warm-up
        for round_ in range(args.rounds):
            for kind, drippers in (("quiet", 0), ("slow", args.drippers)):
                for name in SERVERS:
                    load = os.getloadavg()[0]
                    raw = asyncio.run(
                        scenario(ports[name], key, queries, args.requests, drippers, args.request_timeout_s)
                    )
                    run = {
                        "round": round_,
                        "server": name,
                        "scenario": kind,
                        "loadavg_1m_before": round(load, 2),
                        "timeouts": raw["timeouts"],
                        "errors": raw["errors"],
                        "health_ms": _summary(raw["health"]),
                        "hybrid_ms": _summary(raw["hybrid"]),
                    }
                    result["runs"].append(run)
                    print(run, flush=True)
        rows = []
        for name in SERVERS:
            for kind in ("quiet", "slow"):
                runs = [r for r in result["runs"] if r["server"] == name and r["scenario"] == kind]
                health = [r["health_ms"]["p50"] for r in runs if r["health_ms"]]
                health99 = [r["health_ms"]["p99"] for r in runs if r["health_ms"]]
                hybrid = [r["hybrid_ms"]["p50"] for r in runs if r["hybrid_ms"]]
                timeouts = sum(sum(r["timeouts"].values()) for r in runs)
                rows.append([name, kind, _median(health), _median(health99), _median(hybrid), timeouts])
        result["summary"] = rows
        tables.print_table(
            ["server", "scenario", "health p50", "health p99", "hybrid p50", "timeouts"],
            rows,
            title="median over rounds, ms",
        )
        return 0
    finally:
        for proc in procs.values():
            server.stop_process(proc)
        cleanup = throwaway.clean_up(result, tenant, tier, tenant_prefix="bench-slow")
        path = results.write_result("slow_clients", result)
        print(f"cleanup {cleanup}; wrote {path}")
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)


def _summary(seconds: list[float]) -> dict | None:
    ms = [s * 1000 for s in seconds]
    return (
        {"n": len(ms), "p50": round(stats.percentile(ms, 50), 1), "p99": round(stats.percentile(ms, 99), 1)}
        if ms
        else None
    )


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


if __name__ == "__main__":
    sys.exit(main())
