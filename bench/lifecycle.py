"""Knowledge lifecycle through the real service: ingestion through the API and a Celery worker, search
latency while a new version builds, and the time to switch and roll back. Current figures and the
commands: docs/BENCHMARKS.md, "Knowledge lifecycle".

    .venv/bin/python bench/lifecycle.py --docs 400 --block-docs 100      # all three parts
    .venv/bin/python bench/lifecycle.py --parts switch --synthetic-docs 400 --bystander-chunks 10000

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
bench/results/lifecycle-<date>.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common
import ingest as ingest_bench
import ingest_stages
from lifecycle_drive import Api, SearchLoad, latency_summary, start_worker, wait_worker

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
                seconds["R"] = ingest_bench.raw_encode(embedder, [text for group in groups for text in group])
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
    _common.print_table(
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
    _common.print_table(
        ["searches", "n", "p50 ms", "p95 ms", "errors", "degraded"],
        [
            [phase, s["n"], s["p50_ms"], s["p95_ms"], s["errors"], s["degraded"]]
            for phase, s in [("idle (before + after)", idle), ("during the build", during)]
        ]
        + [["during / idle", "", f"{p50_ratio:.2f}x", f"{p95_ratio:.2f}x", "", ""]],
        title=f"Search while version {build['version']} builds ({build['seconds']} s, {build['state']}; goal <= 1.5x, no error)",
    )
    return result, build["version"]


def part_switch(
    args,
    apis: dict[str, Api],
    base: str,
    key: str,
    kb_id: int,
    new: int,
    old: int,
    queries: list[str],
    log_paths: dict[str, Path],
) -> dict:
    """Alternate activating ``new`` and ``old`` while searches run, through the API of each server
    (with a cheap request before each, as a yardstick; servers in an order alternating round by
    round), then by calling the service in this process; check every answer's version."""
    from knowledge.models import Chunk, KnowledgeBaseVersion
    from knowledge.versions import activate_version

    log_offsets = {name: path.stat().st_size for name, path in log_paths.items()}
    activations = []  # {version, sent, answered, status, how, tree}
    reference_s: dict[str, list[float]] = {name: [] for name in apis}
    names = list(apis)
    versions = {
        v.number: v for v in KnowledgeBaseVersion.objects.filter(knowledge_base_id=kb_id, number__in=[new, old])
    }
    bases = [str(api.client.base_url).rstrip("/") for api in apis.values()]  # searches load every server alike
    with SearchLoad(bases, key, kb_id, itertools.cycle(queries), args.search_clients) as searches:
        time.sleep(args.switch_gap_s)
        for round_ in range(args.switches):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                for number in (new, old):
                    reference_s[name].append(apis[name].read_kb(kb_id))
                    sent = time.perf_counter()
                    status, seconds = apis[name].activate(kb_id, number)
                    activations.append(
                        {
                            "version": number,
                            "sent": sent,
                            "answered": sent + seconds,
                            "status": status,
                            "how": "api",
                            "tree": name,
                        }
                    )
                    time.sleep(args.switch_gap_s)
        for _ in range(args.switches):
            for number in (new, old):
                sent = time.perf_counter()
                activate_version(versions[number])
                activations.append(
                    {
                        "version": number,
                        "sent": sent,
                        "answered": time.perf_counter(),
                        "status": 200,
                        "how": "service",
                        "tree": None,
                    }
                )
                time.sleep(args.switch_gap_s)
    records = searches.records
    version_of = dict(
        Chunk.objects.filter(id__in={c for r in records for c in r["chunk_ids"]}).values_list(
            "id", "kb_version__number"
        )
    )
    # The version a search must show: the last one whose activation was answered before it started
    # (searches overlapping an activation may show either side).
    wrong, mixed, unknown = [], 0, 0
    for record in records:
        if record["status"] != 200 or not record["chunk_ids"]:
            continue
        versions = {version_of.get(chunk_id) for chunk_id in record["chunk_ids"]}
        unknown += None in versions
        mixed += len(versions) > 1
        before = [a for a in activations if a["answered"] <= record["start"]]
        expected = before[-1]["version"] if before else old
        if versions != {expected}:
            during = any(a["sent"] <= record["end"] and a["answered"] >= record["start"] for a in activations)
            if not during:
                wrong.append(
                    {"expected": expected, "got": sorted(v or 0 for v in versions), "cached": record["cached"]}
                )
    service_s = [a["answered"] - a["sent"] for a in activations if a["how"] == "service"]
    searches_summary = latency_summary(records)
    by_tree, rows = {}, []
    for name in names:
        server_ms, reference_server_ms = _access_log_ms(log_paths[name], log_offsets[name])
        over_api = [a for a in activations if a["tree"] == name]
        client_s = {
            number: [a["answered"] - a["sent"] for a in over_api if a["version"] == number] for number in (new, old)
        }
        by_tree[name] = {
            "client_switch_ms": _common.summarize_ms(client_s[new]),
            "client_rollback_ms": _common.summarize_ms(client_s[old]),
            "client_ms_in_order": [round((a["answered"] - a["sent"]) * 1000, 1) for a in over_api],
            "server_ms": _common.summarize_ms([ms / 1000 for ms in server_ms]),
            "server_ms_all": server_ms,
            "reference_kb_read_client_ms": _common.summarize_ms(reference_s[name]),
            "reference_kb_read_server_ms": _common.summarize_ms([ms / 1000 for ms in reference_server_ms]),
            "statuses": sorted({a["status"] for a in over_api}),
        }
        result = by_tree[name]
        for label, summary in [
            ("switch (client)", result["client_switch_ms"]),
            ("rollback (client)", result["client_rollback_ms"]),
            ("both (server, access log)", result["server_ms"]),
            ("yardstick: GET the KB (client)", result["reference_kb_read_client_ms"]),
            ("yardstick: GET the KB (server)", result["reference_kb_read_server_ms"]),
        ]:
            rows.append([name, label, summary["n"], summary["p50_ms"], summary["p95_ms"], summary["max_ms"]])
    service = _common.summarize_ms(service_s)
    rows.append(
        [
            "-",
            "both (activate_version() in-process)",
            len(service_s),
            service["p50_ms"],
            service["p95_ms"],
            service["max_ms"],
        ]
    )
    worst_ms = max(a["answered"] - a["sent"] for a in activations if a["how"] == "api") * 1000
    result = {
        "activations": len(activations),
        "trees": by_tree,
        "service_call_ms": service,
        "searches": searches_summary,
        "wrong_version_answers": len(wrong),
        "wrong_version_samples": wrong[:5],
        "answers_mixing_versions": mixed,
        "answers_with_unknown_chunks": unknown,
        "goal_ms": 100,
        "goal_met": worst_ms < 100 and searches_summary["errors"] == 0 and not wrong and not mixed,
    }
    _common.print_table(
        ["server", "activation", "n", "p50 ms", "p95 ms", "max ms"],
        rows,
        title=(
            f"Switch {old} -> {new} and roll back, x{args.switches}, searches meanwhile: {searches_summary['n']} "
            f"({searches_summary['errors']} failed, {len(wrong)} from the wrong version, {mixed} mixing versions, "
            f"{searches_summary['cached']} cached; goal < 100 ms, no failed search)"
        ),
    )
    return result


def _access_log_ms(log_path: Path, offset: int) -> tuple[list[float], list[float]]:
    """``latency_ms`` of the activation requests and of the yardstick's, from a server's access log."""
    activation_ms, reference_ms = [], []
    with open(log_path, encoding="utf-8", errors="replace") as log:
        log.seek(offset)
        for line in log:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("latency_ms") is None:
                continue
            if entry.get("route") == "version-activate":
                activation_ms.append(entry["latency_ms"])
            elif entry.get("route") == "knowledge-base-detail":
                reference_ms.append(entry["latency_ms"])
    return activation_ms, reference_ms


def build_synthetic_kb(tenant, name: str, rows: list[dict], chunks_per_doc: tuple[int, ...]) -> tuple[int, int]:
    """A KB of one document per row, with one ready version per entry of ``chunks_per_doc`` (the
    row's words cut into that many chunks; the first version active, the others ready), written
    with the production COPY, random unit vectors, the keyword index of each version built from
    its rows. Returns (KB id, chunks written)."""
    import numpy as np
    from django.db import transaction
    from django.utils import timezone

    from knowledge.chunking import ChunkDraft
    from knowledge.ingestion.chunk_copy import ChunkBatch, copy_chunks
    from knowledge.ingestion.files import Labels
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.lexical import rebuild_lexical_index
    from knowledge.models import Document, KnowledgeBaseVersion
    from knowledge.versions import VERSION_SETTINGS

    kb = create_knowledge_base(tenant=tenant, name=name)
    rng = np.random.default_rng(10)
    documents = Document.objects.bulk_create(
        [
            Document(
                tenant=tenant,
                knowledge_base=kb,
                source_uri=f"synthetic/{i:05d}.txt",
                title=row["title"],
                doc_type="txt",
                status=Document.Status.READY,
                chunk_count=chunks_per_doc[0],
            )
            for i, row in enumerate(rows)
        ]
    )
    written = 0
    for number, parts in enumerate(chunks_per_doc, start=1):
        version = (
            kb.active_version
            if number == 1
            else KnowledgeBaseVersion.objects.create(
                knowledge_base=kb,
                number=number,
                status=KnowledgeBaseVersion.Status.READY,
                finished_at=timezone.now(),
                **{setting: getattr(kb, setting) for setting in VERSION_SETTINGS},
            )
        )
        batches = []
        for document, row in zip(documents, rows):
            words = row["text"].split() or ["empty"]
            cut = max(1, -(-len(words) // parts))
            texts = [" ".join(words[i : i + cut]) + f" [v{number}]" for i in range(0, cut * parts, cut)]
            vectors = rng.standard_normal((len(texts), kb.embedding_dim), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            drafts = [ChunkDraft(text=text, token_count=len(text) // 5) for text in texts]
            batches.append(ChunkBatch(document, drafts, vectors, Labels()))
            written += len(texts)
        with transaction.atomic():
            copy_chunks(kb, version, batches)
        rebuild_lexical_index(version)
    return kb.pk, written


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

    _common.setup_django()
    import logging

    from engines.embedders import get_embedder
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base
    from tenants.services import create_api_key, create_tenant

    logging.getLogger("httpx").setLevel(logging.WARNING)
    result: dict = {
        "config": vars(args),
        "machine": _common.machine_info(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "code": _common.code_fingerprint(
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
            tenant = create_tenant(_common.unique_name("bench-lifecycle"))
            tier = _common.unlimited_rate_tier(tenant)
            result["switch"], before = synthetic_switch(args, tenant, workdir)
            result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
            return 0
        rows = _common.read_jsonl(_common.DATASETS_DIR / "scifact" / "corpus.jsonl", limit=args.docs)
        (workdir / "corpus").mkdir()
        blocks, corpus_bytes = ingest_bench.write_corpus(rows, workdir / "corpus", args.block_docs)
        result["corpus"] = {"dataset": "scifact", "docs": len(rows), "bytes": corpus_bytes, "blocks": len(blocks)}
        tenant = create_tenant(_common.unique_name("bench-lifecycle"))
        tier = _common.unlimited_rate_tier(tenant)
        key = create_api_key(tenant=tenant, name="bench", scopes=["search", "ingest"]).raw_key
        embedder = get_embedder()
        result["model"] = embedder.model_name

        port = _common.free_port()
        base = f"http://127.0.0.1:{port}"
        web_log = workdir / "gunicorn.log"
        web = _common.start_gunicorn(port, web_log, {"WEB_THREADS": str(args.web_threads)}, workers=1)
        worker = start_worker(workdir / "worker.log", args.worker_concurrency)
        _common.wait_ready(web, base)
        wait_worker(worker)
        api = Api(base, key)

        # Warm-up, untimed: the worker's model and both ingestion paths' DB path.
        warm = sorted(blocks[0].iterdir())[:8]
        api.wait_tasks([api.upload(api.create_kb("warm-up-api"), warm)])
        warm_kb = create_knowledge_base(tenant=tenant, name="warm-up-inprocess")
        Ingester(warm_kb).ingest(discover_files(warm))
        embedder.embed_documents([path.read_text() for path in warm])

        result["ingest"], kb_id = part_ingest(args, api, blocks, tenant, embedder)
        _, query_texts = _common.scifact_passages_and_queries()
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
                _common.stop_process(proc)
        cleanup = _common.clean_up(result, tenant, tier, tenant_prefix="bench-lifecycle")
        path = _common.write_result("lifecycle", result, key=args.tag or None)
        print(f"cleanup {cleanup}; wrote {path}")
        shutil.rmtree(workdir, ignore_errors=True)


def start_before_server(tree: Path, workdir: Path, key: str) -> tuple[subprocess.Popen, Api, Path]:
    """A gunicorn of another checkout on this checkout's database, Redis and keyword indexes."""
    port, log = _common.free_port(), workdir / "gunicorn-before.log"
    env = {"VAR_DIR": str(_common.REPO_ROOT / "var"), "WEB_THREADS": "4"}
    proc = _common.start_gunicorn(port, log, env, workers=1, tree=tree.resolve())
    _common.wait_ready(proc, f"http://127.0.0.1:{port}")
    return proc, Api(f"http://127.0.0.1:{port}", key), log


def synthetic_switch(args, tenant, workdir: Path) -> tuple[dict, subprocess.Popen | None]:
    """The switch part on a written KB (``--synthetic-docs``), through this checkout's server and
    ``--before-tree``'s; returns its result and the before server (stopped by the caller)."""
    from tenants.services import create_api_key

    rows = _common.read_jsonl(_common.DATASETS_DIR / "scifact" / "corpus.jsonl", limit=args.synthetic_docs)
    started = time.perf_counter()
    kb_id, chunks = build_synthetic_kb(tenant, "lifecycle-synthetic", rows, (2, 3))
    setup = {"docs": len(rows), "chunks": chunks, "bystander_chunks": 0}
    if args.bystander_chunks:
        corpus = _common.read_jsonl(_common.DATASETS_DIR / "scifact" / "corpus.jsonl")
        others = [corpus[i % len(corpus)] for i in range(args.bystander_chunks)]
        setup["bystander_chunks"] = build_synthetic_kb(tenant, "bystander", others, (1,))[1]
    setup["seconds"] = round(time.perf_counter() - started, 1)
    print(f"synthetic KB: {setup}", flush=True)
    key = create_api_key(tenant=tenant, name="bench", scopes=["search", "ingest"]).raw_key
    port, web_log = _common.free_port(), workdir / "gunicorn.log"
    web = _common.start_gunicorn(port, web_log, {"WEB_THREADS": str(args.web_threads)}, workers=1)
    before = None
    try:
        base = f"http://127.0.0.1:{port}"
        _common.wait_ready(web, base)
        apis, logs = {"after": Api(base, key)}, {"after": web_log}
        if args.before_tree:
            before, apis["before"], logs["before"] = start_before_server(args.before_tree, workdir, key)
        _, query_texts = _common.scifact_passages_and_queries()
        result = part_switch(args, apis, base, key, kb_id, 2, 1, query_texts[-args.switch_queries :], logs)
    finally:
        _common.stop_process(web)
    return {"setup": setup, **result}, before


if __name__ == "__main__":
    sys.exit(main())
