"""Two servers side by side at 100k chunks: /bm25, /hybrid and /vector over HTTP, interleaved query by query,
so both share the machine's load minute by minute. Current figures and the command: docs/BENCHMARKS.md,
"Latency at 100k chunks".

    LC_ALL=C.UTF-8 .venv/bin/python -m bench.hybrid_ab --tree before=../before --tree after=. --requests 120

Each ``--tree`` is a checkout with its own ``.venv`` (another commit's ``git worktree add --detach`` or
``git archive``), or this one twice. For each, a subprocess running that tree's code loads the data of
``bench.synthetic.load_synthetic_documents`` (real SciFact passages and vectors mixed into ``--chunks``
synthetic rows) into a throwaway tenant, unless ``--prepared NAME=state.json`` names data already loaded
with ``--in-tree <tree> --step prepare > state.json``. Both trees' gunicorns then serve at once, each query
going to each in turn. ``--server-cache`` also measures cache hits (give each tree its own Redis database
with ``--tree-env NAME=REDIS_URL=...?db=N``, or one tree's misses are the other's hits); ``GET /health`` is
the HTTP floor; ``--throughput-s`` adds closed-loop clients; ``--floor`` times the raw engine calls in the
last tree's process. The servers' CPU per request is reported beside the latencies. The search analytics'
recording cost: this tree twice, ``--tree on=. --tree off=. --tree-env off=SEARCH_LOG_ENABLED=false
--modes hybrid``. Cleanup (always): servers stopped, loaded data deleted, HNSW index restored. Writes
bench/results/hybrid_ab-<date>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.harness import datasets, project, results, server


def _server_args(tree: Path, threads: int) -> list[str]:
    """A tree serving through the asyncio worker takes its app and worker from its config file (Django
    on WEB_THREADS threads); an older one is the threaded WSGI worker."""
    if (tree / "core" / "asgi.py").exists():
        return []
    return ["retrieval_site.wsgi", "--threads", str(threads)]


# --- the driver -------------------------------------------------------------------------------------


def _in_tree(tree: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run this benchmark's ``--in-tree`` step with the tree's interpreter (this checkout's bench, the tree's
    project code); its last stdout line is JSON."""
    out = subprocess.run(
        [str(tree / ".venv" / "bin" / "python"), "-m", "bench.hybrid_ab", "--in-tree", str(tree), *args],
        cwd=project.REPO_ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "LC_ALL": "C.UTF-8", **(env or {})},
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _percentiles(values: list[float]) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]

    return {"n": len(ordered), "p50_ms": round(rank(50), 2), "p95_ms": round(rank(95), 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-tree", help=argparse.SUPPRESS)
    parser.add_argument("--step", choices=("prepare", "cleanup", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH, twice (the first is the baseline)")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument(
        "--embedding-model",
        default="",
        help="prepare: the bench KB's model as its version records it, e.g. all-MiniLM-L6-v2:onnx-int8 "
        "(empty: the default); the stored vectors are the default model's either way (a latency bench)",
    )
    parser.add_argument("--requests", type=int, default=150, help="timed queries per mode and tree")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--modes", default="bm25,hybrid,vector")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument(
        "--embedding-backend", default="", help="EMBEDDING_BACKEND for both servers (empty: each tree's default)"
    )
    parser.add_argument("--server-cache", action="store_true", help="result cache on; also measure cache hits")
    parser.add_argument("--throughput-s", type=float, default=0, help="seconds of closed-loop load per mode and tree")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--floor",
        type=int,
        default=100,
        help="queries for the raw engine calls, in the last tree's process after the HTTP runs (0: skip)",
    )
    parser.add_argument(
        "--tree-env",
        action="append",
        default=[],
        help="NAME=VAR=VALUE: an environment variable for that tree's server only (e.g. its own "
        "REDIS_URL database, so two trees sharing one Redis do not answer each other's misses)",
    )
    parser.add_argument(
        "--prepared",
        action="append",
        default=[],
        help="NAME=FILE: that tree's data is already loaded (FILE holds the JSON its prepare step "
        "printed); it is neither loaded nor cleaned up (for profiling between runs)",
    )
    args = parser.parse_args()

    if args.in_tree:
        from bench.hybrid_ab import tree as in_tree

        tree = Path(args.in_tree)
        if args.step == "prepare":
            print(json.dumps(in_tree.prepare(tree, args.chunks, args.docs, args.seed, args.embedding_model)))
        elif args.step == "floor":
            print(json.dumps(in_tree.floor(tree, json.loads(args.state), args.floor)))
        else:
            print(json.dumps(in_tree.cleanup(tree, json.loads(args.state))))
        return 0

    trees = dict(item.split("=", 1) for item in args.tree)
    trees = {name: Path(path).resolve() for name, path in trees.items()}
    if len(trees) != 2:
        raise SystemExit("give --tree NAME=PATH twice")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # so `finally` cleans up
    import httpx

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    result: dict = {
        "config": vars(args),
        "machine": results.machine_info(),
        "commits": {name: tree_version(path) for name, path in trees.items()},
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    print("; ".join(f"{name}: {trees[name]} at {version}" for name, version in result["commits"].items()), flush=True)
    prepared = {name: json.loads(Path(path).read_text()) for name, path in (i.split("=", 1) for i in args.prepared)}
    states: dict[str, dict] = {}
    procs: dict[str, subprocess.Popen] = {}
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    try:
        for name, tree in trees.items():
            if name in prepared:
                continue
            started = time.perf_counter()
            states[name] = _in_tree(
                tree,
                "--step",
                "prepare",
                "--chunks",
                str(args.chunks),
                "--docs",
                str(args.docs),
                "--seed",
                str(args.seed),
            )
            print(f"{name}: {args.chunks} chunks loaded in {time.perf_counter() - started:.0f} s", flush=True)
        env = {
            "TORCH_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "LC_ALL": "C.UTF-8",
            "SEARCH_CACHE_TTL_S": "3600" if args.server_cache else "0",
        }
        if args.embedding_backend:
            env["EMBEDDING_BACKEND"] = args.embedding_backend
        servers = {**states, **prepared}
        tree_env: dict[str, dict[str, str]] = {name: {} for name in trees}
        for item in args.tree_env:
            name, variable, value = item.split("=", 2)
            tree_env[name][variable] = value
        bases = {}
        for name, tree in trees.items():
            port = server.free_port()
            procs[name] = server.start_gunicorn(
                port,
                logs / f"hybrid_ab-{name}-{os.getpid()}.log",
                {**env, "WEB_THREADS": str(args.threads), **tree_env[name]},
                workers=args.workers,
                extra_args=_server_args(tree, args.threads),
                tree=tree,
            )
            bases[name] = f"http://127.0.0.1:{port}"
        for name in trees:
            server.wait_ready(procs[name], bases[name])
        passages, queries = datasets.scifact_passages_and_queries()
        clients = {
            name: httpx.Client(
                base_url=bases[name], timeout=60, headers={"Authorization": f"Bearer {servers[name]['key']}"}
            )
            for name in trees
        }
        paths = {m: f"/api/v1/retrieval/{m}" for m in modes}

        def call(name: str, mode: str, query: str) -> tuple[float, dict]:
            t0 = time.perf_counter()
            response = clients[name].post(paths[mode], json={"query": query, "top_k": args.top_k, "rerank": False})
            elapsed = time.perf_counter() - t0
            if response.status_code != 200:
                raise RuntimeError(f"{name} {mode}: HTTP {response.status_code} {response.text[:300]}")
            return elapsed * 1000, response.json()

        names = list(trees)
        for query in queries[-args.warmup :]:
            for mode in modes:
                for name in names:
                    call(name, mode, query)
        samples = {
            name: {mode: {"client": [], "server": [], "stages": {}, "critical": {}} for mode in modes} for name in names
        }
        loads = []
        for i, query in enumerate(queries[: args.requests]):
            if i % 25 == 0:
                loads.append(round(os.getloadavg()[0], 2))
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
                for name in names if i % 2 == 0 else names[::-1]:
                    elapsed, payload = call(name, mode, query)
                    sample = samples[name][mode]
                    sample["client"].append(elapsed)
                    sample["server"].append(payload.get("latency_ms", float("nan")))
                    for stage, ms in (payload.get("timings_ms") or {}).items():
                        sample["stages"].setdefault(stage, []).append(ms)
                    for stage, ms in (payload.get("critical_path_ms") or {}).items():
                        sample["critical"].setdefault(stage, []).append(ms)
        result["loadavg_1m_during"] = loads
        result["latency"] = {
            name: {
                mode: {
                    "client": _percentiles(s["client"]),
                    "server": _percentiles(s["server"]),
                    "stage_p50_ms": {st: _percentiles(v)["p50_ms"] for st, v in s["stages"].items()},
                    "critical_path_p50_ms": {st: _percentiles(v)["p50_ms"] for st, v in s["critical"].items()},
                }
                for mode, s in by_mode.items()
            }
            for name, by_mode in samples.items()
        }
        # The HTTP floor: what the front, the middleware and this client cost with no search behind them.
        floor_http = {name: [] for name in names}
        cpu_ms: dict[str, dict[str, float]] = {name: {} for name in names}  # the workers' CPU per request
        cpu_before = {name: server.workers_cpu_s(procs[name]) for name in names}
        for i in range(args.requests):
            for name in names if i % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                clients[name].get("/health").raise_for_status()
                floor_http[name].append((time.perf_counter() - t0) * 1000)
        result["http_floor"] = {name: _percentiles(v) for name, v in floor_http.items()}
        for name in names:
            cpu_ms[name]["health"] = round(
                (server.workers_cpu_s(procs[name]) - cpu_before[name]) * 1000 / args.requests, 2
            )
        if args.server_cache:
            hits = {name: [] for name in names}
            cpu_before = {name: server.workers_cpu_s(procs[name]) for name in names}
            for i in range(args.requests):
                for name in names if i % 2 == 0 else names[::-1]:
                    elapsed, payload = call(name, "hybrid", queries[0])
                    if payload.get("cached"):
                        hits[name].append(elapsed)
            result["cache_hit"] = {name: _percentiles(v) for name, v in hits.items()}
            for name in names:
                cpu_s = server.workers_cpu_s(procs[name]) - cpu_before[name]
                cpu_ms[name]["cache_hit"] = round(cpu_s * 1000 / args.requests, 2)
        if args.throughput_s > 0:
            # Distinct texts (the first words of each SciFact passage), so with the cache on these are misses too.
            texts = list(dict.fromkeys(" ".join(passage.split()[:12]) for passage in passages))
            result["throughput"] = throughput(call, names, modes, texts, args, procs, cpu_ms)
        result["server_cpu_ms_per_request"] = cpu_ms
        for proc in procs.values():
            server.stop_process(proc)
        if args.floor > 0:
            last = names[-1]
            result["floor"] = _in_tree(
                trees[last],
                "--step",
                "floor",
                "--state",
                json.dumps(servers[last]),
                "--floor",
                str(args.floor),
                env=env,
            )
        shown = ("latency", "http_floor", "cache_hit", "throughput", "server_cpu_ms_per_request", "floor")
        print(json.dumps({k: result[k] for k in shown if k in result}, indent=1))
        return 0
    finally:
        for proc in procs.values():
            server.stop_process(proc)
        result["cleanup"] = {}
        for name, state in states.items():
            try:
                result["cleanup"][name] = _in_tree(trees[name], "--step", "cleanup", "--state", json.dumps(state))
            except Exception as exc:  # report and clean the other tree
                result["cleanup"][name] = {"error": repr(exc)}
        result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        print(f"wrote {results.write_result('hybrid_ab', result)}")


def throughput(call, names: list[str], modes: list[str], queries: list[str], args, procs, cpu_ms) -> dict:
    """Requests per second of ``args.clients`` concurrent clients, each mode and tree in turn, in
    slices of ``args.throughput_s / 4`` seconds so both trees see the same load over time; every
    request of a tree and mode a text it was not sent before. Adds each mode's CPU per request of the
    tree's workers to ``cpu_ms``."""
    counts = {name: {mode: [0, 0.0] for mode in modes} for name in names}
    cpu_s = {name: dict.fromkeys(modes, 0.0) for name in names}
    sent = {(name, mode): iter(range(10**9)) for name in names for mode in modes}
    lock = threading.Lock()
    slice_s = args.throughput_s / 4
    for round_ in range(4):
        for mode in modes:
            for name in names if round_ % 2 == 0 else names[::-1]:
                stop = time.perf_counter() + slice_s
                done = [0]

                def client() -> None:
                    while time.perf_counter() < stop:
                        with lock:
                            query = queries[next(sent[name, mode]) % len(queries)]
                        call(name, mode, query)
                        with lock:
                            done[0] += 1

                started, cpu_started = time.perf_counter(), server.workers_cpu_s(procs[name])
                workers = [threading.Thread(target=client) for _ in range(args.clients)]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
                counts[name][mode][0] += done[0]
                counts[name][mode][1] += time.perf_counter() - started
                cpu_s[name][mode] += server.workers_cpu_s(procs[name]) - cpu_started
    for name in names:
        for mode in modes:
            cpu_ms[name][mode] = round(cpu_s[name][mode] * 1000 / max(1, counts[name][mode][0]), 2)
    return {name: {mode: round(n / s, 1) for mode, (n, s) in by_mode.items()} for name, by_mode in counts.items()}


def tree_version(tree: Path) -> str:
    """The code a tree holds: its commit, or for a tree that is no git checkout (a ``git archive`` export)
    a digest of its Python sources, so that two results still say whether they measured the same code."""
    if (tree / ".git").exists():  # a directory in a clone, a file in a worktree
        return subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ).stdout.strip()
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(tree):  # symlinks (.venv) are not followed
        subfolders[:] = sorted(name for name in subfolders if not name.startswith(".") and name != "var")
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(folder) / name
                digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    return f"no git: Python sources sha256 {digest.hexdigest()[:12]}"


if __name__ == "__main__":
    sys.exit(main())
