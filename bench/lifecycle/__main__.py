"""Knowledge lifecycle through the real service: ingestion through the API and a Celery worker, search
latency while a new version builds, and the time to switch and roll back. Current figures and the
commands: docs/BENCHMARKS.md, "Knowledge lifecycle".

    .venv/bin/python -m bench.lifecycle --docs 400 --block-docs 100      # all three parts
    .venv/bin/python -m bench.lifecycle --parts switch --synthetic-docs 400 --bystander-chunks 10000

One gunicorn and one Celery worker as ``./run serve`` starts them, on this checkout's embedded PostgreSQL
and Redis, and a throwaway tenant on an unlimited rate tier. Passes that are compared run in an order
rotating block by block, so a burst of other people's load hits each alike.

1. ``ingest``: per block of SciFact documents, **A** the API (multipart upload, then polling the tasks),
   **I** ``Ingester(kb).ingest`` in this process, **R** the raw ``embed_documents`` of I's texts. Goal: A
   at >= 0.9 of I's chunks/s.
2. ``rebuild``: hybrid searches back to back (fresh queries: no cache hit), idle, then while
   ``POST .../versions`` builds version 2, then idle again. Goal: p50 during the build <= 1.5x idle.
3. ``switch``: searches keep running (a few queries in a cycle, so a cached answer of the replaced
   version would show) while versions 2 and 1 are activated in turn through the API, then by
   ``activate_version`` in-process. A ``GET`` of the KB before each activation is a yardstick of what the
   load does to any request; every hit's version is looked up, so an answer from the wrong version
   counts. ``--before-tree DIR`` also serves the same data from another checkout, alternating round
   by round. ``--synthetic-docs N`` runs this part alone on a KB written without the model (every
   document's chunk count changes at each switch); ``--bystander-chunks M`` adds another KB's rows.

Cleanup (always): servers stopped, indexes, tenant, tier and files deleted. Writes
bench/results/lifecycle-<date>.json. The servers, worker and search load are driven by
bench/lifecycle/drive.py; the switch part is bench/lifecycle/switch.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import datasets, project, results, server, tables, throwaway
from bench.ingest import stages as ingest_stages
from bench.ingest.encode import raw_encode
from bench.lifecycle.drive import Api, SearchLoad, latency_summary
from bench.lifecycle.switch import part_switch, start_before_server, synthetic_switch

PARTS = ("ingest", "rebuild", "switch")


def part_ingest(args, api: Api, blocks: list[Path], tenant, embedder) -> tuple[dict, int]:
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base

    kb_api = api.create_kb("lifecycle-api")
    kb_inproc = create_knowledge_base(tenant=tenant, name="lifecycle-inprocess")
    passes = ["A", "IR"]
    totals = {"A": 0.0, "W": 0.0, "I": 0.0, "R": 0.0}
    chunks = {"A": 0, "I": 0}
    rows = []
    for k, block in enumerate(blocks):
        order = passes[k % 2 :] + passes[: k % 2]
        load = os.getloadavg()[0]
        seconds, counts = {}, {}
        for p in order:
            if p == "A":
                files = sorted(block.iterdir())
                started = time.perf_counter()
                task_ids = [
                    api.upload(kb_api, files[i : i + args.files_per_request])
                    for i in range(0, len(files), args.files_per_request)
                ]
                states = api.wait_tasks(task_ids)
                seconds["A"] = time.perf_counter() - started
                failed = [s for s in states if s["state"] != "SUCCESS" or s["result"].get("failed")]
                if failed:
                    print(f"WARNING: block {k}: {failed[:2]}", file=sys.stderr)
                counts["A"] = sum((s["result"] or {}).get("chunks", 0) for s in states)
                seconds["W"] = sum(
                    (s["result"] or {}).get("seconds", 0.0) for s in states
                )  # the Ingester, in the worker
            else:
                groups: list[list[str]] = []
                with ingest_stages.instrumented(embedder, ingest_stages.Timings(), groups):
                    started = time.perf_counter()
                    report = Ingester(kb_inproc).ingest(discover_files([block]))
                    seconds["I"] = time.perf_counter() - started
                counts["I"] = report.chunks
                seconds["R"] = raw_encode(embedder, [text for group in groups for text in group])
        for p in totals:
            totals[p] += seconds[p]
        for p in chunks:
            chunks[p] += counts[p]
        n = counts["I"]
        rows.append(
            {
                "block": k,
                "order": " ".join(order),
                "loadavg_1m_before": round(load, 2),
                "chunks_api": counts["A"],
                "chunks_inprocess": n,
                **{f"{p}_s": round(v, 3) for p, v in seconds.items()},
            }
        )
        print(
            f"block {k} [{' '.join(order)}]: API+worker {counts['A'] / seconds['A']:.1f}, in-process "
            f"{n / seconds['I']:.1f}, raw encode {n / seconds['R']:.1f} chunks/s; API/in-process "
            f"{seconds['I'] / seconds['A']:.1%} (load {load:.1f})",
            flush=True,
        )
    rate = {"A": chunks["A"] / totals["A"], "I": chunks["I"] / totals["I"], "R": chunks["I"] / totals["R"]}
    ratio = rate["A"] / rate["I"]
    result = {
        "blocks": rows,
        "chunks_api": chunks["A"],
        "chunks_inprocess": chunks["I"],
        "seconds": {p: round(v, 2) for p, v in totals.items()},
        "chunks_per_s": {
            "api_worker": round(rate["A"], 2),
            "inprocess": round(rate["I"], 2),
            "raw_encode": round(rate["R"], 2),
        },
        "ratio_api_vs_inprocess": round(ratio, 4),
        "ratio_inprocess_vs_raw": round(rate["I"] / rate["R"], 4),
        "ratio_api_vs_raw": round(rate["A"] / rate["R"], 4),
        # The Ingester's own time inside the tasks over the whole API path (uploads, queue, polling).
        "worker_ingester_share_of_api_s": round(totals["W"] / totals["A"], 4),
        "per_block_ratio_api_vs_inprocess": [
            round(r["I_s"] / r["A_s"] * r["chunks_api"] / r["chunks_inprocess"], 4) for r in rows
        ],
        "goal": 0.9,
        "goal_met": ratio >= 0.9,
    }
    tables.print_table(
        ["path", "seconds", "chunks", "chunks/s", "vs in-process"],
        [
            ["API + Celery worker", f"{totals['A']:.1f}", chunks["A"], f"{rate['A']:.1f}", f"{ratio:.1%}"],
            ["  of which the Ingester in the worker", f"{totals['W']:.1f}", "", "", ""],
            ["in-process Ingester", f"{totals['I']:.1f}", chunks["I"], f"{rate['I']:.1f}", "100.0%"],
            [
                "raw embed_documents",
                f"{totals['R']:.1f}",
                chunks["I"],
                f"{rate['R']:.1f}",
                f"{rate['R'] / rate['I']:.1%}",
            ],
        ],
        title=f"Ingestion, {len(blocks)} blocks (goal: API + worker >= 90 % of in-process)",
    )
    return result, kb_api


def part_rebuild(args, api: Api, base: str, key: str, kb_id: int, queries) -> tuple[dict, int]:
    """Searches idle, during a version build, idle again; returns the summary and the new version."""
    records: dict[str, list[dict]] = {}
    loads, build = {}, {}
    for phase in ("idle before", "build", "idle after"):
        loads[phase] = round(os.getloadavg()[0], 2)
        with SearchLoad([base], key, kb_id, queries, args.search_clients) as searches:
            if phase == "build":
                started = time.perf_counter()
                task_id, number = api.build_version(
                    kb_id, {"chunk_size": args.rebuild_chunk_size, "activate": "manual"}
                )
                state = api.wait_tasks([task_id], poll_s=0.5)[0]
                build = {
                    "version": number,
                    "seconds": round(time.perf_counter() - started, 1),
                    "state": state["state"],
                    "result": state["result"],
                    "error": state["error"],
                }
            else:
                time.sleep(args.idle_s)
        records[phase] = searches.records
        print(f"{phase}: {latency_summary(searches.records)} (load {loads[phase]})", flush=True)
    idle = latency_summary(records["idle before"] + records["idle after"])
    during = latency_summary(records["build"])
    p50_ratio, p95_ratio = during["p50_ms"] / idle["p50_ms"], during["p95_ms"] / idle["p95_ms"]
    result = {
        "build": build,
        "phases": {phase: latency_summary(rows) for phase, rows in records.items()},
        "loadavg_1m_before": loads,
        "idle": idle,
        "during_build": during,
        "p50_ratio": round(p50_ratio, 3),
        "p95_ratio": round(p95_ratio, 3),
        "goal": 1.5,
        "goal_met": p50_ratio <= 1.5 and p95_ratio <= 1.5 and during["errors"] == 0,
    }
    tables.print_table(
        ["searches", "n", "p50 ms", "p95 ms", "errors", "degraded"],
        [
            [phase, s["n"], s["p50_ms"], s["p95_ms"], s["errors"], s["degraded"]]
            for phase, s in [("idle (before + after)", idle), ("during the build", during)]
        ]
        + [["during / idle", "", f"{p50_ratio:.2f}x", f"{p95_ratio:.2f}x", "", ""]],
        title=f"Search while version {build['version']} builds ({build['seconds']} s, {build['state']}; goal <= 1.5x, no error)",
    )
    return result, build["version"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(PARTS), help="comma list of: " + ", ".join(PARTS))
    parser.add_argument("--docs", type=int, default=1000, help="SciFact documents (default 1000)")
    parser.add_argument("--block-docs", type=int, default=200)
    parser.add_argument("--files-per-request", type=int, default=100)
    parser.add_argument("--worker-concurrency", type=int, default=1)
    parser.add_argument("--web-threads", type=int, default=4)
    parser.add_argument("--search-clients", type=int, default=1)
    parser.add_argument("--idle-s", type=float, default=30, help="seconds of idle searches before and after the build")
    parser.add_argument("--rebuild-chunk-size", type=int, default=160)
    parser.add_argument("--switches", type=int, default=10, help="switch + rollback pairs")
    parser.add_argument("--switch-gap-s", type=float, default=1.5)
    parser.add_argument("--switch-queries", type=int, default=20)
    parser.add_argument("--tag", default="", help="store the result under this key in the JSON file")
    parser.add_argument("--before-tree", type=Path, help="switch: also through a server of this checkout")
    parser.add_argument("--synthetic-docs", type=int, default=0, help="switch alone, on a KB of N written documents")
    parser.add_argument("--bystander-chunks", type=int, default=0, help="with --synthetic-docs: another KB's rows")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if args.synthetic_docs:
        if parts != ["switch"]:
            parser.error("--synthetic-docs runs the switch part alone: --parts switch")
    elif set(parts) - set(PARTS) or ("ingest" not in parts and parts):
        parser.error(f"--parts: a comma list of {', '.join(PARTS)}, starting with ingest (the others need its KB)")
    elif "switch" in parts and "rebuild" not in parts:
        parser.error("--parts: switch needs rebuild (it switches to the version the rebuild built)")

    project.setup_django()
    import logging

    from engines.embedders import get_embedder
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base
    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    result: dict = {
        "config": vars(args),
        "machine": results.machine_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "code": results.code_fingerprint(
            [
                "knowledge/versions.py",
                "knowledge/documents.py",
                "knowledge/tasks.py",
                "knowledge/views.py",
                "retrieval/services",
                "retrieval/cache.py",
            ]
        ),
    }
    if args.before_tree:
        result["code_before"] = {"tree": str(args.before_tree)}
    tenant = tier = web = worker = before = None
    workdir = Path(tempfile.mkdtemp(prefix="bench-lifecycle-"))
    try:
        if args.synthetic_docs:
            tenant = create_tenant(results.unique_name("bench-lifecycle"))
            tier = throwaway.unlimited_rate_tier(tenant)
            result["switch"], before = synthetic_switch(args, tenant, workdir)
            result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            return 0
        rows = datasets.read_jsonl(datasets.DATASETS_DIR / "scifact" / "corpus.jsonl", limit=args.docs)
        (workdir / "corpus").mkdir()
        blocks, corpus_bytes = datasets.write_corpus(rows, workdir / "corpus", args.block_docs)
        result["corpus"] = {"dataset": "scifact", "docs": len(rows), "bytes": corpus_bytes, "blocks": len(blocks)}
        tenant = create_tenant(results.unique_name("bench-lifecycle"))
        tier = throwaway.unlimited_rate_tier(tenant)
        key = create_api_key(tenant=tenant, name="bench", scopes=["search", "ingest"]).raw_key
        embedder = get_embedder()
        result["model"] = embedder.model_name

        port = server.free_port()
        base = f"http://127.0.0.1:{port}"
        web_log = workdir / "gunicorn.log"
        web = server.start_gunicorn(port, web_log, {"WEB_THREADS": str(args.web_threads)}, workers=1)
        worker = server.start_worker(workdir / "worker.log", args.worker_concurrency)
        server.wait_ready(web, base)
        server.wait_worker(worker)
        api = Api(base, key)

        # Warm-up, untimed: the worker's model and both ingestion paths' DB path.
        warm = sorted(blocks[0].iterdir())[:8]
        api.wait_tasks([api.upload(api.create_kb("warm-up-api"), warm)])
        warm_kb = create_knowledge_base(tenant=tenant, name="warm-up-inprocess")
        Ingester(warm_kb).ingest(discover_files(warm))
        embedder.embed_documents([path.read_text() for path in warm])

        result["ingest"], kb_id = part_ingest(args, api, blocks, tenant, embedder)
        _, query_texts = datasets.scifact_passages_and_queries()
        fresh = iter(query_texts + [f"{q} ({i})" for i, q in enumerate(query_texts * 20)])
        if "rebuild" in parts:
            result["rebuild"], new = part_rebuild(args, api, base, key, kb_id, fresh)
            if "switch" in parts:
                apis, logs = {"after": api}, {"after": web_log}
                if args.before_tree:
                    before, apis["before"], logs["before"] = start_before_server(args.before_tree, workdir, key)
                result["switch"] = part_switch(
                    args, apis, base, key, kb_id, new, 1, query_texts[-args.switch_queries :], logs
                )
        result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return 0
    finally:
        for proc in (web, worker, before):
            if proc is not None:
                server.stop_process(proc)
        cleanup = throwaway.clean_up(result, tenant, tier, tenant_prefix="bench-lifecycle")
        path = results.write_result("lifecycle", result, key=args.tag or None)
        print(f"cleanup {cleanup}; wrote {path}")
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
