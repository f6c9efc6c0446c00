"""Ingestion throughput end to end against the raw embedding rate (``embed_documents``) of the same texts.
Current figures and the commands: docs/BENCHMARKS.md, "Ingestion pipeline".

    .venv/bin/python -m bench.ingest                       # 1,000 SciFact abstracts (title + text)
    .venv/bin/python -m bench.ingest --dataset cmrc2018    # 1,000 CMRC 2018 paragraphs (Chinese)
    .venv/bin/python -m bench.ingest --model all-MiniLM-L6-v2:torch \
        --compare-models all-MiniLM-L6-v2:onnx,all-MiniLM-L6-v2:onnx-int8   # runtimes, same run

N corpus documents are written as .txt files in blocks of --block-docs; every model is loaded and
warmed up, with one small untimed ingestion. Per block, the passes run into KBs of their own, in an
order rotating from block to block so a burst of other people's load hits each alike:

- **I**: ``Ingester(kb).ingest`` end to end, with thin timing wrappers around its stages (installed here
  only); **R**: the raw ``embed_documents`` of the block's chunk texts (checked identical to the rows I
  wrote);
- **I:<name>** / **R:<name>** (``--compare-models``): the same with another model;
- **I0** (``--graph-off``): I with the graph stage off, so (I - I0) / I is what the graph adds;
- **G<n>** (``--replay-groups``): the encode in Ingester's flush groups of n.

Ratios are given on wall and on CPU seconds (this process and its PostgreSQL backend), which other
people's jobs disturb less; --budget-min stops starting blocks that would not fit. Cleanup (always):
tenant, keyword indexes and files deleted. Writes bench/results/ingest-<date>.json.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import datasets, project, results
from bench.ingest import report as ingest_report
from bench.ingest.encode import flush_groups, padded_tokens, raw_encode, raw_encode_groups
from bench.ingest.stages import Timings, graph_stage_off, instrumented

DATASETS = {
    "scifact": datasets.DATASETS_DIR / "scifact" / "corpus.jsonl",
    "cmrc2018": datasets.DATASETS_DIR / "cmrc2018" / "corpus.jsonl",
}


def cpu_now(backend_pid: int | None) -> float:
    """CPU seconds used so far by this process (all threads) plus its PostgreSQL backend process."""
    total = time.process_time()
    if backend_pid:
        try:
            fields = Path(f"/proc/{backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass  # a remote server (DATABASE_URL): its CPU is not visible from here
    return total


def drop_lexical_indexes(tenant) -> None:
    """Ingestion also writes an on-disk lexical index per KB version; remove the bench's."""
    try:
        from engines import get_lexical_index
        from knowledge.models import KnowledgeBaseVersion
    except ImportError:
        return
    try:
        index = get_lexical_index()
        for version_id in KnowledgeBaseVersion.objects.filter(knowledge_base__tenant=tenant).values_list(
            "pk", flat=True
        ):
            index.drop_version(version_id)
    except Exception as exc:  # cleanup must go on to delete the tenant
        print(f"WARNING: could not drop the bench's lexical indexes: {exc}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="scifact")
    parser.add_argument(
        "--model",
        default=None,
        help="embedding model of I and R (default: EMBEDDING_MODEL), "
        "e.g. all-MiniLM-L6-v2:torch, all-MiniLM-L6-v2:onnx, all-MiniLM-L6-v2:onnx-int8",
    )
    parser.add_argument(
        "--compare-models",
        default="",
        metavar="NAMES",
        help="comma list of more embedding models, each ingested alongside (pass I:<name>)",
    )
    parser.add_argument("--docs", type=int, default=1000, help="number of corpus documents (default 1000)")
    parser.add_argument("--block-docs", type=int, default=200, help="documents per paired block (default 200)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over all blocks, each into a fresh KB")
    parser.add_argument(
        "--replay-groups",
        action="store_true",
        help="also time raw encode on ingestion's own flush groups (EMBED_FLUSH_CHUNKS; one more pass per block)",
    )
    parser.add_argument(
        "--replay-flush",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="also time raw encode in groups formed like Ingester would with a flush size of N (repeatable)",
    )
    parser.add_argument(
        "--graph-off",
        action="store_true",
        help="also ingest each block with the graph stage off (pass I0): the graph's share",
    )
    parser.add_argument(
        "--budget-min",
        type=float,
        default=12.0,
        help="stop starting new blocks when the script would exceed this many minutes (default 12)",
    )
    parser.add_argument("--tag", default="", help="store the result under '<dataset>-<tag>' in the JSON file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile one extra, untimed ingestion of all docs (outside --budget-min)",
    )
    parser.add_argument("--profile-top", type=int, default=30)
    results.add_wait_quiet(parser)
    args = parser.parse_args()
    load_at_start = results.wait_for_quiet(args.wait_quiet)
    script_started = time.perf_counter()

    project.setup_django()
    from django.conf import settings

    from engines.embedders import get_embedder
    from knowledge.chunking import chunk_sections
    from knowledge.ingestion import pipeline
    from knowledge.ingestion.files import discover_files
    from knowledge.ingestion.pipeline import Ingester
    from knowledge.knowledge_bases import create_knowledge_base
    from knowledge.models import Chunk
    from knowledge.parsing import parse_file
    from tenants.services import create_tenant

    rows = datasets.read_jsonl(DATASETS[args.dataset], limit=args.docs)
    folder = Path(tempfile.mkdtemp(prefix=f"bench-ingest-{args.dataset}-"))
    tenant = None
    result: dict = {"dataset": args.dataset, "docs": len(rows), "rounds": args.rounds, "block_docs": args.block_docs}
    try:
        blocks, corpus_bytes = datasets.write_corpus(rows, folder, args.block_docs)
        result["corpus_bytes"] = corpus_bytes
        started = time.perf_counter()
        embedder = get_embedder(args.model)
        compare_models = [name.strip() for name in args.compare_models.split(",") if name.strip()]
        compared = {name: get_embedder(name) for name in compare_models}
        result["model"] = embedder.model_name
        result["compare_models"] = compare_models
        result["model_load_s"] = round(time.perf_counter() - started, 2)
        result["machine"] = results.machine_info()
        result["loadavg_1m_at_start"] = round(load_at_start, 2)
        result["code"] = results.code_fingerprint(
            [
                "knowledge/ingestion/pipeline.py",
                "knowledge/ingestion/chunk_rows.py",
                "knowledge/chunking.py",
                "knowledge/parsing.py",
                "engines/embedders/sentence_transformers_embedder.py",
                "engines/embedders/onnx_embedder.py",
                "engines/tantivy_index.py",
            ]
        )
        result["settings"] = {
            "EMBEDDING_BATCH_SIZE": settings.EMBEDDING_BATCH_SIZE,
            "TORCH_THREADS": settings.TORCH_THREADS,
            "ONNX_THREADS": settings.ONNX_THREADS,
            "ONNX_BATCH_SIZE": settings.ONNX_BATCH_SIZE,
            "EMBED_FLUSH_CHUNKS": pipeline.EMBED_FLUSH_CHUNKS,
            "EMBED_FIRST_FLUSH_CHUNKS": getattr(pipeline, "EMBED_FIRST_FLUSH_CHUNKS", None),
        }
        tenant = create_tenant(results.unique_name("bench-ingest"))

        # Warm-up: tokenizer, kernels and allocator of every model, then the DB path.
        sample = [f"{r.get('title', '')} {r.get('text', '')}" for r in rows[:64]]
        for warming in [embedder, *compared.values()]:
            warming.embed_documents(sample)
        warm_kb = create_knowledge_base(tenant=tenant, name="warm-up", embedding_model=embedder.model_name)
        Ingester(warm_kb).ingest(discover_files([blocks[0]])[:8])
        chunk_size, chunk_overlap = warm_kb.chunk_size, warm_kb.chunk_overlap
        result["chunk_size_tokens"], result["chunk_overlap_tokens"] = chunk_size, chunk_overlap

        # Parse + chunk alone, same files and settings as ingestion.
        parse_s = chunk_s = 0.0
        block_texts: list[list[str]] = []
        block_groups: list[list[list[str]]] = []
        block_docs_texts: list[list[list[str]]] = []
        for block in blocks:
            per_doc = []
            for source in discover_files([block]):
                t0 = time.perf_counter()
                parsed = parse_file(source.path)
                t1 = time.perf_counter()
                drafts = chunk_sections(
                    parsed.sections,
                    count_tokens=embedder.count_tokens,
                    chunk_size=chunk_size,
                    chunk_overlap=chunk_overlap,
                )
                t2 = time.perf_counter()
                parse_s += t1 - t0
                chunk_s += t2 - t1
                per_doc.append([d.text for d in drafts])
            block_texts.append([t for texts in per_doc for t in texts])
            block_groups.append(
                flush_groups(per_doc, pipeline.EMBED_FLUSH_CHUNKS, getattr(pipeline, "EMBED_FIRST_FLUSH_CHUNKS", None))
            )
            block_docs_texts.append(per_doc)
        all_texts = [t for texts in block_texts for t in texts]
        n_chunks = len(all_texts)
        tokens = [embedder.count_tokens(t) for t in all_texts]
        result.update(
            chunks=n_chunks,
            parse_only_s=round(parse_s, 3),
            chunk_only_s=round(chunk_s, 3),
            chunk_tokens_mean=round(statistics.fmean(tokens), 1),
            chunk_tokens_max=max(tokens),
            chunks_under_32_tokens=sum(t < 32 for t in tokens),
        )
        print(
            f"{args.dataset}: {len(rows)} docs in {len(blocks)} blocks, {corpus_bytes / 1e6:.2f} MB -> {n_chunks} chunks "
            f"(mean {result['chunk_tokens_mean']} tokens, {result['chunks_under_32_tokens']} under 32); "
            f"parse {parse_s:.2f} s, chunk {chunk_s:.2f} s",
            flush=True,
        )

        real, padded_blocks = padded_tokens(embedder, block_texts)
        _, padded_groups = padded_tokens(embedder, [g for groups in block_groups for g in groups])
        _, padded_corpus = padded_tokens(embedder, [all_texts])
        result["padding"] = {
            "real_tokens": real,
            "padded_tokens_one_call_per_block": padded_blocks,
            "padded_tokens_flush_groups": padded_groups,
            "padded_tokens_one_call_whole_corpus": padded_corpus,
        }
        print(
            f"tokens the model processes (incl. padding): one call per block {padded_blocks / real:.3f}x real, "
            f"ingestion's flush groups {padded_groups / real:.3f}x, whole corpus in one call {padded_corpus / real:.3f}x",
            flush=True,
        )

        # Passes per block: I (ingest), R (raw encode, one call), G<n> (raw encode in groups formed like
        # Ingester does with a flush size of n). Their order rotates from block to block.
        replay_sizes = sorted(set(args.replay_flush) | ({pipeline.EMBED_FLUSH_CHUNKS} if args.replay_groups else set()))
        replays = [f"G{n}" for n in replay_sizes]
        passes = ["I", "R"] + replays + [f"{kind}:{name}" for name in compare_models for kind in ("I", "R")]
        passes += ["I0"] if args.graph_off else []
        replay_padding = {}
        for size in replay_sizes:
            replayed = [g for per_doc in block_docs_texts for g in flush_groups(per_doc, size)]
            _, padded = padded_tokens(embedder, replayed)
            replay_padding[size] = padded
        result["padding"]["padded_tokens_replay_flush"] = {str(n): v for n, v in replay_padding.items()}
        totals = dict.fromkeys(passes, 0.0)
        cpu_s = dict.fromkeys(passes, 0.0)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend_pid = cursor.fetchone()[0]
        timings = Timings()
        block_rows = []
        round_rows = []
        group_mismatch = 0
        text_mismatch = 0
        ingested_chunks = 0
        step = 0
        done_chunks = 0
        budget_hit = False
        for r in range(1, args.rounds + 1):
            if budget_hit:
                break
            kb = create_knowledge_base(tenant=tenant, name=f"ingest-round-{r}", embedding_model=embedder.model_name)
            compare_kbs = {
                name: create_knowledge_base(tenant=tenant, name=f"ingest-round-{r}-{name}", embedding_model=name)
                for name in compare_models
            }
            graph_off_kb = (
                create_knowledge_base(
                    tenant=tenant, name=f"ingest-round-{r}-no-graph", embedding_model=embedder.model_name
                )
                if args.graph_off
                else None
            )
            round_totals = dict.fromkeys(passes, 0.0)
            round_texts: list[str] = []
            for k, block in enumerate(blocks):
                # Stay inside the time budget: skip the rest once the next block would not fit. Every
                # block is measured on both sides, so the ratio over the blocks done stays paired.
                spent = time.perf_counter() - script_started
                per_chunk = sum(totals.values()) / done_chunks if done_chunks else 0.0
                if done_chunks and spent + per_chunk * len(block_texts[k]) > args.budget_min * 60:
                    budget_hit = True
                    print(
                        f"time budget of {args.budget_min} min reached: stopping after {len(block_rows)} blocks",
                        flush=True,
                    )
                    break
                shift = step % len(passes)
                order = passes[shift:] + passes[:shift]
                step += 1
                seconds = {}
                load = os.getloadavg()[0]
                for p in order:
                    cpu_before = cpu_now(backend_pid)
                    if p == "I":
                        groups: list[list[str]] = []
                        with instrumented(embedder, timings, groups):
                            started = time.perf_counter()
                            report = Ingester(kb).ingest(discover_files([block]))
                            seconds["I"] = time.perf_counter() - started
                        ingested_chunks += report.chunks
                        if report.failed or report.chunks != len(block_texts[k]):
                            print(f"WARNING: block {k}: {report.as_dict()}", file=sys.stderr)
                        group_mismatch += groups != block_groups[k]
                    elif p == "R":
                        seconds["R"] = raw_encode(embedder, block_texts[k])
                    elif p.startswith("R:"):
                        seconds[p] = raw_encode(compared[p[2:]], block_texts[k])
                    elif p.startswith("I:"):
                        started = time.perf_counter()
                        report = Ingester(compare_kbs[p[2:]]).ingest(discover_files([block]))
                        seconds[p] = time.perf_counter() - started
                        if report.failed or report.chunks != len(block_texts[k]):
                            print(f"WARNING: block {k}, {p}: {report.as_dict()}", file=sys.stderr)
                    elif p == "I0":
                        with graph_stage_off():
                            started = time.perf_counter()
                            report = Ingester(graph_off_kb).ingest(discover_files([block]))
                            seconds[p] = time.perf_counter() - started
                        if report.failed or report.chunks != len(block_texts[k]):
                            print(f"WARNING: block {k}, {p}: {report.as_dict()}", file=sys.stderr)
                    else:
                        size = int(p[1:])
                        seconds[p] = raw_encode_groups(embedder, flush_groups(block_docs_texts[k], size))
                    cpu_s[p] += cpu_now(backend_pid) - cpu_before
                n = len(block_texts[k])
                done_chunks += n
                round_texts.extend(block_texts[k])
                for p in seconds:
                    totals[p] += seconds[p]
                    round_totals[p] += seconds[p]
                block_rows.append(
                    {
                        "round": r,
                        "block": k,
                        "order": " ".join(order),
                        "chunks": n,
                        "loadavg_1m_before": round(load, 2),
                        **{f"{p}_s": round(v, 3) for p, v in seconds.items()},
                        "ratio_I_vs_R": round(seconds["R"] / seconds["I"], 4),
                    }
                )
                replay = "".join(f", raw in flush groups of {p[1:]} {n / seconds[p]:.1f}" for p in replays)
                replay += f", ingest without the graph {n / seconds['I0']:.1f}" if "I0" in seconds else ""
                replay += "".join(
                    f", {'ingest' if p[0] == 'I' else 'raw'} {p[2:]} {n / seconds[p]:.1f}" for p in passes if ":" in p
                )
                print(
                    f"round {r} block {k} [{' '.join(order)}]: ingest {n / seconds['I']:.1f}, raw {n / seconds['R']:.1f}{replay} "
                    f"chunks/s; ratio {seconds['R'] / seconds['I']:.1%} (load {load:.1f})",
                    flush=True,
                )
            written = list(
                Chunk.objects.filter(knowledge_base=kb)
                .order_by("document__source_uri", "ordinal")
                .values_list("content", flat=True)
            )
            text_mismatch += sum(a != b for a, b in zip(written, round_texts)) + abs(len(written) - len(round_texts))
            round_rows.append(
                {
                    "round": r,
                    **{f"{p}_s": round(v, 3) for p, v in round_totals.items()},
                    "ratio": round(round_totals["R"] / round_totals["I"], 4),
                }
            )

        result["blocks_done"] = len(block_rows)
        result["blocks_planned"] = len(blocks) * args.rounds
        result["time_budget_hit"] = budget_hit
        result.update(
            texts_identical_to_db_rows=text_mismatch == 0,
            flush_groups_identical_to_ingestion=group_mismatch == 0,
            blocks_detail=block_rows,
            rounds_detail=round_rows,
        )
        measured = {"totals": totals, "cpu_s": cpu_s, "timings": timings, "passes": passes, "replays": replays}
        ingest_report.summarize(result, **measured)
        ingest_report.print_report(
            result,
            **measured,
            title=(
                f"Ingestion vs raw encode - {args.dataset}, {len(rows)} docs x {args.rounds} rounds, "
                f"{n_chunks} chunks per round, {result['blocks_done']}/{result['blocks_planned']} blocks measured, "
                f"model {embedder.model_name}"
            ),
        )

        if args.profile:
            kb = create_knowledge_base(tenant=tenant, name="ingest-profile")
            profiler = cProfile.Profile()
            profiler.enable()
            Ingester(kb).ingest(discover_files([folder]))
            profiler.disable()
            results.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            stats_path = results.result_path(f"ingest-profile-{args.dataset}").with_suffix(".pstats")
            profiler.dump_stats(stats_path)
            for key in ("tottime", "cumulative"):
                buffer = io.StringIO()
                pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats(key).print_stats(args.profile_top)
                print(f"\ncProfile of one untimed ingestion, sorted by {key} (full stats: {stats_path}):")
                print(buffer.getvalue())
            result["profile_stats"] = str(stats_path)

        path = results.write_result("ingest", result, key=f"{args.dataset}-{args.tag}" if args.tag else args.dataset)
        print(f"\nwrote {path}")
        return 0
    finally:
        if tenant is not None:
            drop_lexical_indexes(tenant)
            started = time.perf_counter()
            tenant.delete()
            print(f"deleted bench tenant {tenant.name} in {time.perf_counter() - started:.1f} s")
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
