"""Where a cache hit's time goes inside a gunicorn worker: py-spy on one worker of a tree answering the
same ``/hybrid`` body back to back, its request thread's samples split by part.

    VAR_DIR=$PWD/var .venv/bin/python bench/hit_profile.py --tree . --prepared /tmp/state.json --redis-db 5

``--prepared``: the state ``bench/hybrid_ab.py --step prepare`` printed (its tenant's key is used; the
tree must share that database: ``VAR_DIR``). One worker, ``WEB_THREADS=4``, result cache on, its own
Redis database; one httpx client warms the entry, then py-spy (``--idle``, wall time) records the
worker for ``--seconds``. Each sample of a request thread (``core.asgi.WSGIOnThreads``) counts for the
first part whose frame it holds (:data:`PARTS`), else for "the rest". Not interleaved: compare two
trees run one after the other only as an indication. Prints JSON (the client's p50/p95 while sampled,
and the split in percent).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from _common import start_gunicorn, stop_process, wait_ready

QUERY = {"query": "what causes inflammation in the lungs", "top_k": 10}
# (part, frames any of which puts a sample in it), the first match wins: the order nests outer calls last.
PARTS = [
    ("API key check (and what rides on it)", ("api_key_for (",)),
    ("rate limit (django-ratelimit)", ("ratelimit",)),
    ("cache key", ("search_cache_key (",)),
    ("cache lookup (Redis)", ("_get_or_lock (",)),
    ("searched versions, own query", ("searched_knowledge (",)),
    ("cached answer decoded", ("_load (",)),
    ("input validation (DRF)", ("is_valid (",)),
    ("rendering", ("render (",)),
    ("after the answer: response close", ("close (",)),
]
REQUEST_THREAD = "WSGIOnThreads._respond"


def split(raw_samples: str) -> dict[str, float]:
    """py-spy's raw format (``frame;frame;... count`` per line) -> percent of the request threads' samples."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw_samples.splitlines():
        stack, _, count = line.rpartition(" ")
        if REQUEST_THREAD not in stack:
            continue
        part = next((name for name, frames in PARTS if any(frame in stack for frame in frames)), "the rest")
        counts[part] += int(count)
    total = sum(counts.values())
    return {part: round(100 * n / total, 1) for part, n in counts.most_common()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, required=True, help="the checkout to serve (with its .venv)")
    parser.add_argument("--prepared", type=Path, required=True, help="hybrid_ab.py --step prepare's output")
    parser.add_argument("--redis-db", type=int, required=True, help="a Redis database of its own")
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--port", type=int, default=18731)
    args = parser.parse_args()

    key = json.loads(args.prepared.read_text())["key"]
    var = os.environ["VAR_DIR"]
    env = {"WEB_THREADS": "4", "REDIS_URL": f"unix://{var}/redis/redis.sock?db={args.redis_db}"}
    log = Path(tempfile.gettempdir()) / f"hit_profile-{args.port}.log"
    server = start_gunicorn(args.port, log, env, workers=1, tree=args.tree.resolve())
    stop, latencies = threading.Event(), []
    try:
        base = f"http://127.0.0.1:{args.port}"
        wait_ready(server, base)

        def client() -> None:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
                while not stop.is_set():
                    started = time.perf_counter()
                    http.post("/api/v1/retrieval/hybrid", json=QUERY).raise_for_status()
                    latencies.append((time.perf_counter() - started) * 1000)

        thread = threading.Thread(target=client)
        thread.start()
        time.sleep(3)  # the entry stored, the key remembered
        latencies.clear()
        worker = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True, check=True)
        with tempfile.NamedTemporaryFile(suffix=".txt") as samples:
            subprocess.run(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--idle", "--rate", "500", "--format", "raw",
                 "-d", str(args.seconds), "-p", worker.stdout.split()[0], "-o", samples.name],
                check=True, capture_output=True,
            )  # fmt: skip
            parts = split(Path(samples.name).read_text())
        stop.set()
        thread.join()
    finally:
        stop.set()
        stop_process(server)
    latencies.sort()
    print(json.dumps({
        "hits": len(latencies),
        "client_p50_ms": round(latencies[len(latencies) // 2], 2),
        "client_p95_ms": round(latencies[int(len(latencies) * 0.95)], 2),
        "request_thread_percent": parts,
    }, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
