import json
import shlex
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from knowledge.errors import InvalidChunking
from knowledge.ingestion.pipeline import IngestReport
from knowledge.models import PARENT_CHILD, PLAIN, KnowledgeBase
from knowledge.search_settings import AGGREGATES, FUSIONS, LEG_CANDIDATES, LEG_WEIGHTS
from retrieval.evaluation import protocol
from retrieval.evaluation.datasets import BeirDataset, corpus_files, load_dataset
from retrieval.evaluation.knowledge_bases import (
    KbSettings,
    eval_knowledge_base,
    ingest_corpus,
    labelled_knowledge_base,
)
from retrieval.evaluation.metrics import METRICS
from retrieval.evaluation.reports import build_report, compare_reports, git_commit
from retrieval.evaluation.runs import RunResult, run_variant
from retrieval.evaluation.sweep import (
    SWEEP_CANDIDATES,
    SWEEP_RRF_KS,
    SWEEP_WEIGHTS,
    best_run,
    suggested_settings,
    write_suggested_settings,
)
from retrieval.evaluation.variants import DEPTH, EXPANDERS, build_variants, parse_feedback, parse_weight_grid
from retrieval.types import MODES
from tenants.models import Tenant
from tenants.selectors import TenantNotFound


def _ints(spec: str) -> list[int]:
    try:
        return [int(value) for value in spec.split(",") if value.strip()]
    except ValueError:
        raise CommandError(f"expected comma-separated integers, got {spec!r}") from None


def _relevant_kept(curve: dict[str, Any]) -> str:
    """Share of relevant top-10 hits a ``relevance`` threshold keeps where it drops half of the others."""
    if "relevant_kept_there" not in curve:
        return "-"
    return f"{curve['relevant_kept_there']:.3f} at {curve['threshold_dropping_half_of_others']:.3f}"


def _threshold_columns(curve: dict[str, Any]) -> list[str]:
    """The threshold keeping 90 % of the relevant top-10 hits, the share a reference threshold keeps, and
    how many of the hits at relevance 0 are judged relevant (of all hits at 0)."""
    keeping = curve.get("threshold_keeping_90")
    reference = curve.get("kept_at_reference") or {}
    kept = reference.get("relevant_kept")
    zero = curve.get("at_zero", {"hits": 0, "judged_relevant": 0})
    return [
        "-" if keeping is None else f"{keeping:.4f}",
        "-" if kept is None else f"{kept:.3f} at {reference['threshold']:.4f}",
        f"{zero['judged_relevant']} of {zero['hits']}",
    ]


def _names(spec: str | None) -> list[str]:
    return [name.strip() for name in (spec or "").split(",") if name.strip()]


class Command(BaseCommand):
    help = (
        "Evaluate retrieval relevance on a BEIR-layout dataset (nDCG@10, Recall@10/100, MRR@10, latency) "
        "through the service's search pipeline, or compare two reports with --compare."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", type=Path, help="folder with corpus.jsonl, queries.jsonl, qrels/<split>.tsv")
        parser.add_argument("--split", default="dev")
        parser.add_argument("--modes", default="vector,bm25,hybrid")
        parser.add_argument("--kb", default=None, help="evaluation KB name (default: <dataset>-<model>-<hash8>)")
        parser.add_argument(
            "--tenant",
            default=None,
            help="evaluate this tenant's own KB --kb with the folder's labelled queries (no corpus.jsonl, nothing "
            "ingested; a judgment's corpus id is a document's file name or source URI)",
        )
        parser.add_argument("--model", default=None, help="embedding model name or folder (default: EMBEDDING_MODEL)")
        parser.add_argument("--languages", default=None, help="languages the model covers, e.g. zh,en")
        parser.add_argument("--chunk-size", type=int, default=None)
        parser.add_argument("--chunk-overlap", type=int, default=None)
        parser.add_argument(
            "--chunking", choices=[PLAIN, PARENT_CHILD], default=PLAIN,
            help="parent_child: --chunk-size is the children's (default 128), hits return their parents",
        )  # fmt: skip
        parser.add_argument("--parent-chunk-size", type=int, default=None, help="parent_child: tokens (default 512)")
        parser.add_argument("--output", type=Path, default=None, help="JSON report (default: var/eval/reports/...)")
        parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N judged queries")
        parser.add_argument(
            "--weights", default=None, help="hybrid weights, e.g. vector=0.5,bm25=1; vector=0.5,1,bm25=1 sweeps two"
        )
        parser.add_argument(
            "--fusion",
            default=None,
            help=f"hybrid: how the lists become one: {','.join(FUSIONS)}; a list sweeps values",
        )
        parser.add_argument(
            "--leg-weights",
            default=None,
            help=f"hybrid RRF: {','.join(LEG_WEIGHTS)} (per-query leg weights or the fixed ones); a list sweeps values",
        )
        parser.add_argument(
            "--leg-candidates",
            default=None,
            help=f"hybrid: {','.join(LEG_CANDIDATES)} (each leg ranks both legs' candidates or its own); "
            "a list sweeps values",
        )
        parser.add_argument("--rrf-k", default=None, help="RRF k for hybrid; a comma-separated list sweeps values")
        parser.add_argument(
            "--dense-floor", default=None, help="hybrid: dense weight for uncovered languages; a list sweeps values"
        )
        parser.add_argument(
            "--aggregate", default=None, help="how a document's chunks add up: none,max,sum; a list sweeps values"
        )
        parser.add_argument(
            "--sweep",
            action="store_true",
            help="hybrid over a grid of fusion settings (weights, RRF k and candidates not given take "
            f"{SWEEP_WEIGHTS}; {','.join(map(str, SWEEP_RRF_KS))}; "
            f"{','.join(map(str, SWEEP_CANDIDATES))}), then the best by nDCG@10",
        )
        parser.add_argument(
            "--write", action="store_true", help="with --sweep: store the best settings on the KB's active version"
        )
        parser.add_argument(
            "--candidates", default=str(DEPTH), help="depth of each retriever's list; a list sweeps values"
        )
        parser.add_argument(
            "--feedback",
            default=None,
            help="RM3 on the BM25 leg as DOCS:TERMS:QUERY_WEIGHT, e.g. 10:10:0.5; 0 for none; a list sweeps values "
            "(0,10:10:0.5)",
        )
        parser.add_argument("--expand", default=None, help="query expanders to use together: synonyms,spelling,llm")
        parser.add_argument("--rerank", action="store_true")
        parser.add_argument(
            "--threshold",
            type=float,
            default=None,
            help="a relevance threshold set elsewhere (e.g. the one keeping 90 %% on SciFact): the share of "
            "relevant top-10 hits it keeps here",
        )
        parser.add_argument(
            "--choose-default",
            action="store_true",
            help="the protocol for the service's default fusion: --dataset is a folder of BEIR datasets; every "
            f"candidate ({', '.join(protocol.CANDIDATES)}) runs on each one's train and dev splits, is selected on "
            'the even query ids and confirmed on the odd ones (docs/relevance.md, "Choosing a default")',
        )
        parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE.json", "AFTER.json"))
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["compare"]:
            self._compare(*options["compare"])
        elif options["choose_default"] and options["dataset"]:
            self._choose_default(options)
        elif options["dataset"]:
            self._evaluate(options)
        else:
            raise CommandError("give --dataset DIR to evaluate, or --compare A.json B.json")

    def _evaluate(self, options: dict[str, Any]) -> None:
        commit = git_commit()
        if options["write"] and not options["sweep"]:
            raise CommandError("--write stores what --sweep found: give --sweep too")
        if options["tenant"] and not options["kb"]:
            raise CommandError("--tenant evaluates one of the tenant's knowledge bases: name it with --kb")
        if options["sweep"]:
            options["modes"] = "hybrid"
            options["weights"] = options["weights"] or SWEEP_WEIGHTS
            options["rrf_k"] = options["rrf_k"] or ",".join(map(str, SWEEP_RRF_KS))
            if options["candidates"] == str(DEPTH):  # the option's default
                options["candidates"] = ",".join(map(str, SWEEP_CANDIDATES))
        modes = _names(options["modes"])
        expand = tuple(_names(options["expand"]))
        unknown = sorted(set(modes) - set(MODES)) + sorted(set(expand) - set(EXPANDERS))
        unknown += sorted(set(_names(options["aggregate"])) - set(AGGREGATES))
        unknown += sorted(set(_names(options["leg_weights"])) - set(LEG_WEIGHTS))
        unknown += sorted(set(_names(options["leg_candidates"])) - set(LEG_CANDIDATES))
        if unknown := unknown + sorted(set(_names(options["fusion"])) - set(FUSIONS)):
            raise CommandError(
                f"unknown mode, expander, aggregate, leg weights, leg candidates or fusion: {', '.join(unknown)}"
            )
        candidates = _ints(options["candidates"])
        if shallow := [depth for depth in candidates if depth < DEPTH]:
            raise CommandError(
                f"--candidates {','.join(map(str, shallow))}: a search fuses at least its top_k candidates, and an "
                f"evaluation asks for {DEPTH} results, so it would measure {DEPTH}"
            )
        try:
            weights = parse_weight_grid(options["weights"]) if options["weights"] else [None]
            floors: list[float | None] = [float(value) for value in _names(options["dense_floor"])] or [None]
            feedbacks: list[tuple[int, int, float] | None] = [
                parse_feedback(value) for value in _names(options["feedback"])
            ] or [None]
            dataset = load_dataset(options["dataset"], options["split"], with_corpus=not options["tenant"])
        except (ValueError, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from None
        variants = build_variants(
            modes,
            candidates=candidates,
            weights=weights,
            rrf_ks=_ints(options["rrf_k"]) if options["rrf_k"] else [None],
            fusions=_names(options["fusion"]) or [None],
            leg_weights=_names(options["leg_weights"]) or [None],
            leg_candidates=_names(options["leg_candidates"]) or [None],
            floors=floors,
            aggregates=_names(options["aggregate"]) or [None],
            feedbacks=feedbacks,
            expand=expand,
            rerank=options["rerank"],
        )
        quiet = options["no_progress"]
        if options["tenant"]:
            tenant, kb, ingestion = *self._labelled_kb(options["tenant"], options["kb"]), None
        else:
            kb, ingestion = self._ingested_kb(dataset, options)
            tenant = kb.tenant

        query_ids = list(dataset.qrels)[: options["limit"]]
        results = []
        for variant in variants:
            with tqdm(total=len(query_ids), unit="q", desc=variant.label, disable=quiet, file=self.stderr) as bar:
                results.append(run_variant(tenant, kb, dataset, variant, query_ids, bar.update))
                results[-1].reference_threshold = options["threshold"]

        command = shlex.join(sys.argv) if sys.argv[1:2] == ["evaluate"] else None  # None under call_command
        report = build_report(dataset, kb, results, ingestion, command=command, commit=commit)
        if options["sweep"]:
            report["sweep"] = self._sweep_outcome(kb, results, write=options["write"])
        stamp = report["created_at"].replace(":", "")
        output = (
            options["output"] or Path(settings.VAR_DIR) / "eval" / "reports" / f"{kb.name}-{dataset.split}-{stamp}.json"
        )
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        self._print_runs(dataset, [result.summary() for result in results])
        self.stdout.write(f"report: {output}")

    def _choose_default(self, options: dict[str, Any]) -> None:
        """Every candidate and both legs on every shared split under the folder, then the decision."""
        commit = git_commit()
        splits = [
            (folder, split)
            for folder in sorted(path for path in Path(options["dataset"]).iterdir() if path.is_dir())
            for split in protocol.SHARED_SPLITS
            if (folder / "qrels" / f"{split}.tsv").is_file() and (folder / "corpus.jsonl").is_file()
        ]
        names = [f"{folder.name}/{split}" for folder, split in splits]
        reference = next((name for name in names if name.split("/")[0] == protocol.REFERENCE_SET), None)
        if reference is None:
            raise CommandError(
                f"{options['dataset']} has no {protocol.REFERENCE_SET} dataset with a train or dev split"
            )
        variants = {**protocol.leg_variants(), **{name: protocol.variant_of(name) for name in protocol.CANDIDATES}}
        runs: dict[str, dict[str, RunResult]] = {}
        query_halves: dict[str, dict[str, list[str]]] = {}
        for name, (folder, split) in zip(names, splits, strict=True):
            dataset = load_dataset(folder, split)
            kb, _ = self._ingested_kb(dataset, options)
            tenant = kb.tenant
            query_ids = list(dataset.qrels)[: options["limit"]]
            query_halves[name] = protocol.halves(query_ids)
            runs[name] = {}
            for label, variant in variants.items():
                desc = f"{name} {label}"
                with tqdm(
                    total=len(query_ids), unit="q", desc=desc, disable=options["no_progress"], file=self.stderr
                ) as bar:
                    runs[name][label] = run_variant(tenant, kb, dataset, variant, query_ids, bar.update)
        thresholds = protocol.reference_thresholds(runs[reference], query_halves[reference])
        sets = {name: protocol.set_scores(runs[name], query_halves[name], thresholds) for name in names}
        decision = protocol.choose(protocol.CANDIDATES, protocol.CURRENT_DEFAULT, sets, reference)
        self._print_protocol(sets, query_halves, thresholds, decision)
        whole = protocol.whole_splits(runs, query_halves, reference)
        self._print_whole(whole)
        report = protocol.decision_report(sets, query_halves, thresholds, decision, commit=commit)
        report["whole_splits"] = whole
        stamp = report["created_at"].replace(":", "")
        output = options["output"] or Path(settings.VAR_DIR) / "eval" / "reports" / f"choose-default-{stamp}.json"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        self.stdout.write(f"report: {output}")

    def _print_protocol(
        self,
        sets: dict[str, protocol.SetScores],
        query_halves: dict[str, dict[str, list[str]]],
        thresholds: dict[str, dict[str, float]],
        decision: protocol.Decision,
    ) -> None:
        names = list(sets)
        header = ["run", *(f"{name} {half}" for name in names for half in protocol.HALVES)]
        self.stdout.write("nDCG@10 per half (queries: " + ", ".join(
            f"{name} {len(query_halves[name]['even'])}/{len(query_halves[name]['odd'])}" for name in names
        ) + ")")  # fmt: skip
        runs = list(next(iter(sets.values())).ndcg)
        self._table(
            header,
            [
                [run, *(f"{sets[name].ndcg[run][half]:.4f}" for name in names for half in protocol.HALVES)]
                for run in runs
            ],
        )
        self.stdout.write("threshold share per half (the reference set's threshold keeping 90 %, per candidate)")
        self._table(
            [*header, "threshold"],
            [
                [
                    run,
                    *(f"{sets[name].threshold_share[run][half]:.3f}" for name in names for half in protocol.HALVES),
                    "/".join(f"{thresholds[run][half]:.4f}" for half in protocol.HALVES),
                ]
                for run in thresholds
            ],
        )
        for verdict in decision.verdicts:
            reasons = "; ".join(f"{half}: {', '.join(verdict.failures[half]) or 'passes'}" for half in protocol.HALVES)
            self.stdout.write(f"{verdict.candidate}: {reasons}")
        self.stdout.write(f"selected on the even halves: {decision.selected or 'none'}")
        self.stdout.write(f"winner: {decision.winner} (current default: {decision.default})")

    def _print_whole(self, whole: dict[str, Any]) -> None:
        names = list(whole)
        self.stdout.write(
            "whole splits: nDCG@10, the share of relevant top-10 hits kept at the threshold keeping 90 % on "
            "the reference set, and the hits at relevance 0 judged relevant (of all hits at 0)"
        )
        self._table(
            ["run", *names],
            [
                [
                    run,
                    *(
                        f"{whole[name][run]['ndcg@10']:.4f}"
                        + (
                            ""
                            if whole[name][run]["threshold_share"] is None
                            else f" {whole[name][run]['threshold_share']:.3f}"
                        )
                        + f" {whole[name][run]['at_zero']['judged_relevant']} of {whole[name][run]['at_zero']['hits']}"
                        for name in names
                    ),
                ]
                for run in whole[names[0]]
            ],
        )

    def _labelled_kb(self, tenant_name: str, kb_name: str) -> tuple[Tenant, KnowledgeBase]:
        try:
            tenant, kb = labelled_knowledge_base(tenant_name, kb_name)
        except (TenantNotFound, KnowledgeBase.DoesNotExist):
            raise CommandError(f"tenant {tenant_name!r} has no knowledge base named {kb_name!r}") from None
        version = kb.active_version.number if kb.active_version else "none active"
        self.stdout.write(f"evaluating knowledge base {tenant.name}/{kb.name} (version {version})")
        return tenant, kb

    def _ingested_kb(self, dataset: BeirDataset, options: dict[str, Any]) -> tuple[KnowledgeBase, IngestReport]:
        kb_settings = KbSettings(
            model=options["model"] or settings.EMBEDDING_MODEL,
            languages=tuple(_names(options["languages"])) if options["languages"] else None,
            chunk_size=options["chunk_size"],
            chunk_overlap=options["chunk_overlap"],
            chunking=options["chunking"],
            parent_chunk_size=options["parent_chunk_size"],
        )
        try:
            kb, created = eval_knowledge_base(dataset, kb_settings, options["kb"])
        except (ValueError, InvalidChunking) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{'created' if created else 'reusing'} knowledge base {kb.tenant.name}/{kb.name}")
        files = corpus_files(dataset)
        with tqdm(total=len(files), unit="doc", desc="ingest", disable=options["no_progress"], file=self.stderr) as bar:
            ingestion = ingest_corpus(kb, files, bar.update)
        summary = ingestion.as_dict()
        rate = f", {ingestion.chunks / ingestion.seconds:.1f} chunks/s" if ingestion.chunks else ""
        self.stdout.write(
            "corpus: {added} added, {unchanged} unchanged, {replaced} replaced, {failed} failed; "
            "{chunks} chunks in {seconds} s".format(**summary)
            + rate
        )
        return kb, ingestion

    def _sweep_outcome(self, kb: KnowledgeBase, results: list[RunResult], *, write: bool) -> dict[str, Any]:
        best = best_run(results)
        suggested = suggested_settings(best.variant)
        ndcg = best.summary()["metrics"]["ndcg@10"]
        self.stdout.write(f"best: {best.variant.label} (nDCG@10 {ndcg:.4f}); search settings {json.dumps(suggested)}")
        if write:
            stored = write_suggested_settings(kb, suggested)
            version = kb.active_version.number if kb.active_version else "none active"
            where = f"{kb.tenant.name}/{kb.name} version {version}"
            self.stdout.write(f"written to {where}: {json.dumps(stored)}")
        else:
            self.stdout.write("not written: add --write to store them on the knowledge base's active version")
        return {"best": best.variant.label, "search_settings": suggested, "written": write}

    def _print_runs(self, dataset: BeirDataset, runs: list[dict[str, Any]]) -> None:
        header = [
            "run", *METRICS, "p50 ms", "p95 ms", "dense skipped", "relevant kept",
            "keeps 90 %", "kept at threshold", "relevant at 0",
        ]  # fmt: skip
        rows = [
            [
                run["label"],
                *(f"{run['metrics'][metric]:.4f}" for metric in METRICS),
                f"{run['latency_ms']['p50']}",
                f"{run['latency_ms']['p95']}",
                f"{run['dense_skipped_queries']}" if run["mode"] == "hybrid" else "-",
                _relevant_kept(run["relevance_threshold"]),
                *_threshold_columns(run["relevance_threshold"]),
            ]
            for run in runs
        ]
        self.stdout.write(f"{dataset.name} ({dataset.split}), {runs[0]['queries'] if runs else 0} queries")
        self._table(header, rows)
        if degraded := [run["label"] for run in runs if run["degraded_queries"]]:
            self.stderr.write(f"degraded answers (a backend failed) in: {', '.join(degraded)}")

    def _compare(self, before_path: Path, after_path: Path) -> None:
        try:
            before, after = (json.loads(path.read_text(encoding="utf-8")) for path in (before_path, after_path))
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read report: {exc}") from None
        rows = compare_reports(before, after)
        if not rows:
            raise CommandError("no run of the first report matches a run of the second (same label, or same mode)")
        self._table(
            ["run", "queries", *(f"Δ {metric}" for metric in METRICS), "Δ p50 ms", "nDCG better/worse"],
            [
                [
                    row["label"],
                    str(row["queries"]),
                    *(f"{row['delta'][metric]:+.4f}" for metric in METRICS),
                    f"{row['latency_p50_delta_ms']:+.2f}",
                    f"{row['ndcg@10_better']}/{row['ndcg@10_worse']}",
                ]
                for row in rows
            ],
        )

    def _table(self, header: list[str], rows: list[list[str]]) -> None:
        widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
        for line in [header, ["-" * width for width in widths], *rows]:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
