"""The switch part of bench/lifecycle/: versions activated in turn through the API (and in process)
while searches run, through this checkout's server and another's (``--before-tree``), and the written KB
that ``--synthetic-docs`` switches on its own."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path

from bench.harness import datasets, project, server, stats, tables
from bench.lifecycle.drive import Api, SearchLoad, latency_summary


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
            "client_switch_ms": stats.summarize_ms(client_s[new]),
            "client_rollback_ms": stats.summarize_ms(client_s[old]),
            "client_ms_in_order": [round((a["answered"] - a["sent"]) * 1000, 1) for a in over_api],
            "server_ms": stats.summarize_ms([ms / 1000 for ms in server_ms]),
            "server_ms_all": server_ms,
            "reference_kb_read_client_ms": stats.summarize_ms(reference_s[name]),
            "reference_kb_read_server_ms": stats.summarize_ms([ms / 1000 for ms in reference_server_ms]),
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
    service = stats.summarize_ms(service_s)
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
    tables.print_table(
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
    from knowledge.ingestion.chunk_rows import ChunkBatch, write_chunks
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
            write_chunks(kb, version, batches)
        rebuild_lexical_index(version)
    return kb.pk, written


def start_before_server(tree: Path, workdir: Path, key: str) -> tuple[subprocess.Popen, Api, Path]:
    """A gunicorn of another checkout on this checkout's database, Redis and keyword indexes."""
    port, log = server.free_port(), workdir / "gunicorn-before.log"
    env = {"VAR_DIR": str(project.REPO_ROOT / "var"), "WEB_THREADS": "4"}
    proc = server.start_gunicorn(port, log, env, workers=1, tree=tree.resolve())
    server.wait_ready(proc, f"http://127.0.0.1:{port}")
    return proc, Api(f"http://127.0.0.1:{port}", key), log


def synthetic_switch(args, tenant, workdir: Path) -> tuple[dict, subprocess.Popen | None]:
    """The switch part on a written KB (``--synthetic-docs``), through this checkout's server and
    ``--before-tree``'s; returns its result and the before server (stopped by the caller)."""
    from tenants.services import create_api_key

    rows = datasets.read_jsonl(datasets.DATASETS_DIR / "scifact" / "corpus.jsonl", limit=args.synthetic_docs)
    started = time.perf_counter()
    kb_id, chunks = build_synthetic_kb(tenant, "lifecycle-synthetic", rows, (2, 3))
    setup = {"docs": len(rows), "chunks": chunks, "bystander_chunks": 0}
    if args.bystander_chunks:
        corpus = datasets.read_jsonl(datasets.DATASETS_DIR / "scifact" / "corpus.jsonl")
        others = [corpus[i % len(corpus)] for i in range(args.bystander_chunks)]
        setup["bystander_chunks"] = build_synthetic_kb(tenant, "bystander", others, (1,))[1]
    setup["seconds"] = round(time.perf_counter() - started, 1)
    print(f"synthetic KB: {setup}", flush=True)
    key = create_api_key(tenant=tenant, name="bench", scopes=["search", "ingest"]).raw_key
    port, web_log = server.free_port(), workdir / "gunicorn.log"
    web = server.start_gunicorn(port, web_log, {"WEB_THREADS": str(args.web_threads)}, workers=1)
    before = None
    try:
        base = f"http://127.0.0.1:{port}"
        server.wait_ready(web, base)
        apis, logs = {"after": Api(base, key)}, {"after": web_log}
        if args.before_tree:
            before, apis["before"], logs["before"] = start_before_server(args.before_tree, workdir, key)
        _, query_texts = datasets.scifact_passages_and_queries()
        result = part_switch(args, apis, base, key, kb_id, 2, 1, query_texts[-args.switch_queries :], logs)
    finally:
        server.stop_process(web)
    return {"setup": setup, **result}, before
