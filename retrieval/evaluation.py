"""Relevance evaluation on BEIR-layout datasets, through the service's own search pipeline.

The metrics are pure functions over a ranking of corpus ids and a query's judgments, so they can
be checked by hand. The rest ingests a corpus into a dedicated tenant once, runs each query with
``retrieval.services.search.search`` (what the API calls), and builds a JSON-ready report: numbers that
measure what clients get, not a lab copy of the pipeline.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
from django.conf import settings

from engines import get_lexical_index
from engines.embedders import get_embedder
from knowledge.ingestion.files import SIDECAR_SUFFIX, SourceFile, discover_files
from knowledge.ingestion.pipeline import Ingester, IngestReport
from knowledge.knowledge_bases import get_or_create_knowledge_base, update_search_settings
from knowledge.lexical import rebuild_lexical_index
from knowledge.models import KnowledgeBase
from knowledge.search_settings import merged_search_settings
from knowledge.selectors import analyzer_for_tenant, knowledge_bases_of, search_settings_of
from retrieval.expansion import ExpansionOptions
from retrieval.services.search import search
from retrieval.tuning import DEFAULT_FEEDBACK
from retrieval.types import MODES, SearchRequest
from tenants.models import Tenant
from tenants.selectors import tenant_by_name
from tenants.services import get_or_create_tenant

EVAL_TENANT = "eval"
DEPTH = 100  # results per query: enough for Recall@100
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
EXPANDERS = ("synonyms", "spelling", "llm")
DOC_SUFFIX = ".txt"
# How the corpus is written as files (2: titles in sidecars, not in the text); part of the KB's name.
CORPUS_LAYOUT = "2"

Judgments = dict[str, int]  # corpus id -> relevance grade


# --- metrics ----------------------------------------------------------------------------------------


def distinct(ranking: Iterable[str]) -> list[str]:
    """A document's rank is the rank of its best chunk: keep each id at its first position only."""
    return list(dict.fromkeys(ranking))


def _dcg(gains: Iterable[float]) -> float:
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def ndcg_at_k(ranking: Sequence[str], judgments: Judgments, k: int = 10) -> float:
    """nDCG@k as BEIR (pytrec_eval ``ndcg_cut``) computes it: gain = the relevance grade itself, not
    2^rel - 1, discounted by log2(rank + 1). The ideal ranking sorts every positive judgment, also
    those naming documents missing from the corpus, so unreachable judgments lower the score. The
    ranking is taken in the order given (the service breaks its own ties); 0.0 without a positive
    judgment."""
    ideal = _dcg(sorted((grade for grade in judgments.values() if grade > 0), reverse=True)[:k])
    if not ideal:
        return 0.0
    return _dcg(max(judgments.get(doc, 0), 0) for doc in distinct(ranking)[:k]) / ideal


def recall_at_k(ranking: Sequence[str], judgments: Judgments, k: int) -> float:
    """Relevant documents (grade > 0) in the top k / all relevant documents; 0.0 without any."""
    relevant = {doc for doc, grade in judgments.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(distinct(ranking)[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], judgments: Judgments, k: int = 10) -> float:
    """1 / rank of the first relevant document (grade > 0) within the top k, else 0.0."""
    for rank, doc in enumerate(distinct(ranking)[:k], start=1):
        if judgments.get(doc, 0) > 0:
            return 1 / rank
    return 0.0


def score_query(ranking: Sequence[str], judgments: Judgments) -> dict[str, float]:
    return {
        "ndcg@10": ndcg_at_k(ranking, judgments, 10),
        "recall@10": recall_at_k(ranking, judgments, 10),
        "recall@100": recall_at_k(ranking, judgments, 100),
        "mrr@10": mrr_at_k(ranking, judgments, 10),
    }


def threshold_curve(judged_scores: Sequence[tuple[float, bool]], steps: int = 20) -> dict:
    """How a ``relevance`` threshold splits hits judged relevant (True) and not: the share of relevant hits
    kept and of the others dropped at thresholds 0, 1/steps, ..., 1, and the share of relevant hits kept
    at the threshold that drops half of the others (their median score)."""
    relevant = np.array([score for score, judged in judged_scores if judged])
    others = np.array([score for score, judged in judged_scores if not judged])
    if not len(relevant) or not len(others):
        return {"relevant_hits": len(relevant), "other_hits": len(others), "curve": []}
    half = float(np.median(others))
    return {
        "relevant_hits": len(relevant),
        "other_hits": len(others),
        "threshold_dropping_half_of_others": round(half, 4),
        "relevant_kept_there": round(float(np.mean(relevant >= half)), 4),
        "curve": [
            {
                "threshold": round(t, 4),
                "relevant_kept": round(float(np.mean(relevant >= t)), 4),
                "others_dropped": round(float(np.mean(others < t)), 4),
            }
            for t in (i / steps for i in range(steps + 1))
        ],
    }


# --- datasets ---------------------------------------------------------------------------------------


@dataclass
class BeirDataset:
    """``corpus.jsonl``, ``queries.jsonl`` and one ``qrels/<split>.tsv`` of a BEIR-layout folder."""

    name: str
    path: Path
    split: str
    corpus_sha256: str
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, Judgments]  # only queries that have a text and at least one positive judgment

    @property
    def missing_judged_docs(self) -> int:
        """Positive judgments that name a document absent from the corpus (they still count as relevant)."""
        return sum(
            1 for judged in self.qrels.values() for doc, grade in judged.items() if grade > 0 and doc not in self.corpus
        )


def _read_jsonl(path: Path) -> Iterable[dict]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def read_qrels(path: Path) -> dict[str, Judgments]:
    """``query-id corpus-id score`` rows, tab separated, with or without the header line."""
    qrels: dict[str, Judgments] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3 or fields[0] == "query-id":
                continue
            qrels.setdefault(fields[0], {})[fields[1]] = int(fields[2])
    return qrels


def load_dataset(path: Path, split: str, *, with_corpus: bool = True) -> BeirDataset:
    """``with_corpus=False``: the labelled queries of a KB that already holds the documents (no
    ``corpus.jsonl``); each judgment's corpus id names a document by its file name or source URI
    and is read as :func:`corpus_id_from_uri` reads a hit's, so both sides match."""
    path = Path(path)
    corpus_path, qrels_path = path / "corpus.jsonl", path / "qrels" / f"{split}.tsv"
    for required in ([corpus_path] if with_corpus else []) + [path / "queries.jsonl", qrels_path]:
        if not required.is_file():
            raise FileNotFoundError(f"not a BEIR dataset folder: {required} is missing")
    digest = hashlib.sha256()
    corpus = {}
    if with_corpus:
        with open(corpus_path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        corpus = {str(row["_id"]): (row.get("title") or "", row.get("text") or "") for row in _read_jsonl(corpus_path)}
    queries = {str(row["_id"]): row["text"] for row in _read_jsonl(path / "queries.jsonl")}
    qrels = {
        qid: judged if with_corpus else {corpus_id_from_uri(doc): grade for doc, grade in judged.items()}
        for qid, judged in read_qrels(qrels_path).items()
        if queries.get(qid, "").strip() and any(grade > 0 for grade in judged.values())
    }
    corpus_sha256 = digest.hexdigest() if with_corpus else ""
    return BeirDataset(path.resolve().name, path, split, corpus_sha256, corpus, queries, qrels)


# --- the evaluation corpus as files ------------------------------------------------------------------


def doc_filename(corpus_id: str) -> str:
    """A reversible, path-safe file name: percent-encoding that also encodes dots (no ``..``)."""
    return quote(corpus_id, safe="").replace(".", "%2E") + DOC_SUFFIX


def corpus_id_from_uri(source_uri: str) -> str:
    """Back from ``Document.source_uri`` (``<folder>/<file name>``) to the corpus id."""
    return unquote(source_uri.rsplit("/", 1)[-1].removesuffix(DOC_SUFFIX))


def corpus_folder(dataset: BeirDataset) -> Path:
    """``var/eval/<dataset>-<hash8>-<layout>/``, one ``.txt`` of text per corpus document, its title in
    a ``.meta.json`` sidecar (the document's title, as a user would label it). Written once into a
    temporary folder and renamed, so a folder that exists is complete."""
    folder = Path(settings.VAR_DIR) / "eval" / f"{dataset.name}-{dataset.corpus_sha256[:8]}-{CORPUS_LAYOUT}"
    if folder.is_dir():
        return folder
    staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    staging.mkdir(parents=True)
    for corpus_id, (title, text) in dataset.corpus.items():
        path = staging / doc_filename(corpus_id)
        path.write_text(text, encoding="utf-8")
        if title.strip():
            sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
            sidecar.write_text(json.dumps({"title": title.strip()}, ensure_ascii=False), encoding="utf-8")
    staging.rename(folder)
    return folder


def corpus_files(dataset: BeirDataset) -> list[SourceFile]:
    return discover_files([corpus_folder(dataset)])


# --- the evaluation knowledge base -------------------------------------------------------------------


@dataclass(frozen=True)
class KbSettings:
    """What the indexes depend on; with the corpus hash it names the KB, so a change gets a new KB."""

    model: str
    languages: tuple[str, ...] | None = None  # None: what the service knows for the model
    chunk_size: int | None = None  # None: the service defaults
    chunk_overlap: int | None = None

    def kb_name(self, dataset: BeirDataset) -> str:
        key = json.dumps(
            [dataset.corpus_sha256, CORPUS_LAYOUT, self.model, self.languages, self.chunk_size, self.chunk_overlap]
        )
        short_model = Path(self.model).name.lower()
        return f"{dataset.name}-{short_model}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"[:100]


def eval_tenant() -> Tenant:
    return get_or_create_tenant(EVAL_TENANT)


def eval_knowledge_base(
    dataset: BeirDataset, kb_settings: KbSettings, name: str | None = None
) -> tuple[KnowledgeBase, bool]:
    """The evaluation KB (created when missing); refuses a same-named KB built with another model."""
    kb, created = get_or_create_knowledge_base(
        tenant=eval_tenant(),
        name=name or kb_settings.kb_name(dataset),
        embedding_model=kb_settings.model,
        chunk_size=kb_settings.chunk_size,
        chunk_overlap=kb_settings.chunk_overlap,
        languages=list(kb_settings.languages) if kb_settings.languages is not None else None,
    )
    if kb.embedding_model != kb_settings.model:
        raise ValueError(f"knowledge base {kb.name!r} was built with {kb.embedding_model}, not {kb_settings.model}")
    return kb, created


def ingest_corpus(kb: KnowledgeBase, files: list[SourceFile], on_progress: Callable[[int], None]) -> IngestReport:
    """Ingest (unchanged files are skipped, so a reused or interrupted KB costs only what is missing),
    then rebuild the keyword index if the analyzer changed since it was built."""
    report = Ingester(kb, on_progress=on_progress).ingest(files)
    analyzer = analyzer_for_tenant(kb.tenant_id)
    state = get_lexical_index().state(kb.active_version_id)
    if state is not None and (state.analyzer_version, state.dictionary_fingerprint) != (
        analyzer.version,
        analyzer.dictionary_fingerprint,
    ):
        rebuild_lexical_index(kb.active_version)
    return report


# --- runs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One row of results: a mode and the request settings it depends on (None: the service default)."""

    mode: str
    candidates: int
    weights: tuple[tuple[str, float], ...] | None = None
    rrf_k: int | None = None
    expand: tuple[str, ...] = ()
    rerank: bool = False
    dense_weight_floor: float | None = None
    aggregate: str | None = None
    feedback: tuple[int, int, float] | None = None  # RM3 (docs, terms, query weight); None: the service default
    fusion: str | None = None  # rrf, relevance or minmax; None: the service default
    leg_weights: str | None = None  # RRF's: evidence or fixed; None: the service default
    leg_candidates: str | None = None  # hybrid: union or own; None: the service default

    @property
    def label(self) -> str:
        parts = [self.mode, f"cand={self.candidates}"]
        if self.weights is not None:
            parts.append("w=" + ",".join(f"{name}={value:g}" for name, value in self.weights))
        if self.fusion is not None:
            parts.append(f"fusion={self.fusion}")
        if self.leg_weights is not None:
            parts.append(f"legs={self.leg_weights}")
        if self.leg_candidates is not None:
            parts.append(f"candidates_of={self.leg_candidates}")
        if self.rrf_k is not None:
            parts.append(f"k={self.rrf_k}")
        if self.dense_weight_floor is not None:
            parts.append(f"floor={self.dense_weight_floor:g}")
        if self.aggregate is not None:
            parts.append(f"aggregate={self.aggregate}")
        if self.feedback is not None:
            docs, terms, query_weight = self.feedback
            parts.append(f"rm3={docs}x{terms}@{query_weight:g}" if docs else "rm3=off")
        if self.expand:
            parts.append("expand=" + "+".join(self.expand))
        if self.rerank:
            parts.append("rerank")
        return " ".join(parts)

    def request(self, query: str, kb_id: int) -> SearchRequest:
        return SearchRequest(
            query=query,
            mode=self.mode,
            top_k=DEPTH,
            kb_ids=[kb_id],
            weights=dict(self.weights) if self.weights else None,
            candidates=self.candidates,
            fusion=self.fusion,
            leg_weights=self.leg_weights,
            leg_candidates=self.leg_candidates,
            rrf_k=self.rrf_k,
            dense_weight_floor=self.dense_weight_floor,
            aggregate=self.aggregate,
            feedback_docs=self.feedback[0] if self.feedback else None,
            feedback_terms=self.feedback[1] if self.feedback else None,
            feedback_query_weight=self.feedback[2] if self.feedback else None,
            rerank=self.rerank,
            expand=ExpansionOptions(**{name: name in self.expand for name in EXPANDERS}),
        )

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "mode": self.mode,
            "candidates": self.candidates,
            "weights": dict(self.weights) if self.weights is not None else None,
            "fusion": self.fusion,
            "leg_weights": self.leg_weights,
            "leg_candidates": self.leg_candidates,
            "rrf_k": self.rrf_k,
            "dense_weight_floor": self.dense_weight_floor,
            "aggregate": self.aggregate,
            "feedback": list(self.feedback) if self.feedback is not None else None,
            "expand": list(self.expand),
            "rerank": self.rerank,
        }


def parse_weight_grid(spec: str) -> list[tuple[tuple[str, float], ...]]:
    """``vector=0.5,1,bm25=1`` -> every combination: a bare number adds a value to the name before it."""
    grid: dict[str, list[float]] = {}
    name = None
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        if "=" in item:
            name, item = (piece.strip() for piece in item.split("=", 1))
            grid.setdefault(name, [])
        if name is None:
            raise ValueError(f"weights {spec!r}: a value must follow a name, as in vector=0.5,bm25=1")
        grid[name].append(float(item))
    return [tuple(zip(grid, values)) for values in itertools.product(*grid.values())]


def parse_feedback(spec: str) -> tuple[int, int, float]:
    """``docs:terms:query_weight`` (``0`` alone: no feedback) -> RM3 settings; ValueError when malformed."""
    parts = spec.split(":")
    if parts == ["0"]:
        return 0, DEFAULT_FEEDBACK.terms, DEFAULT_FEEDBACK.query_weight
    if len(parts) != 3:
        raise ValueError(f"feedback {spec!r}: expected DOCS:TERMS:QUERY_WEIGHT such as 10:10:0.5, or 0")
    return int(parts[0]), int(parts[1]), float(parts[2])


def build_variants(
    modes: Sequence[str],
    *,
    candidates: Sequence[int],
    weights: Sequence[tuple[tuple[str, float], ...] | None] = (None,),
    rrf_ks: Sequence[int | None] = (None,),
    fusions: Sequence[str | None] = (None,),
    leg_weights: Sequence[str | None] = (None,),
    leg_candidates: Sequence[str | None] = (None,),
    floors: Sequence[float | None] = (None,),
    aggregates: Sequence[str | None] = (None,),
    feedbacks: Sequence[tuple[int, int, float] | None] = (None,),
    expand: tuple[str, ...] = (),
    rerank: bool = False,
) -> list[Variant]:
    """Every combination per mode; fusion settings apply to hybrid only, so a single-leg mode gets one
    row per candidate depth instead of identical repeats, feedback (BM25's) none to the vector mode, and
    RRF k and leg weights none to a score fusion."""
    variants: list[Variant] = []
    for mode in modes:
        hybrid = (
            itertools.product(weights, rrf_ks, floors, fusions, leg_weights, leg_candidates)
            if mode == "hybrid"
            else [(None,) * 6]
        )
        rm3 = [None] if mode == "vector" else feedbacks
        for (weight, rrf_k, floor, fusion, legs, union), depth, method, feedback in itertools.product(
            list(hybrid), candidates, aggregates, rm3
        ):
            rrf_k, legs = (rrf_k, legs) if fusion in (None, "rrf") else (None, None)
            variant = Variant(mode, depth, weight, rrf_k, expand, rerank, floor, method, feedback, fusion, legs, union)
            if variant not in variants:
                variants.append(variant)
    return variants


@dataclass
class RunResult:
    variant: Variant
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)  # metrics + latency_ms
    degraded_queries: int = 0
    dense_skipped_queries: int = 0
    judged_relevance: list[tuple[float, bool]] = field(default_factory=list)  # top-10 documents' relevance

    def summary(self) -> dict:
        latencies = [scores["latency_ms"] for scores in self.per_query.values()]
        return {
            **self.variant.as_dict(),
            "queries": len(self.per_query),
            "metrics": {
                metric: round(float(np.mean([s[metric] for s in self.per_query.values()])), 4)
                if self.per_query
                else 0.0
                for metric in METRICS
            },
            "latency_ms": {
                "p50": round(float(np.percentile(latencies, 50)), 2) if latencies else None,
                "p95": round(float(np.percentile(latencies, 95)), 2) if latencies else None,
            },
            "degraded_queries": self.degraded_queries,
            "dense_skipped_queries": self.dense_skipped_queries,
            "relevance_threshold": threshold_curve(self.judged_relevance),
        }

    def as_dict(self) -> dict:
        return {**self.summary(), "per_query": self.per_query}


def run_variant(
    tenant: Tenant,
    kb: KnowledgeBase,
    dataset: BeirDataset,
    variant: Variant,
    query_ids: Sequence[str],
    on_progress: Callable[[int], None] = lambda done: None,
) -> RunResult:
    """Every query through ``search``; latency is the wall time of that call (one untimed warm-up
    first, so loading the model is not counted)."""
    result = RunResult(variant)
    if query_ids:
        search(tenant, variant.request(dataset.queries[query_ids[0]], kb.pk))
    for qid in query_ids:
        started = time.perf_counter()
        response = search(tenant, variant.request(dataset.queries[qid], kb.pk))
        latency_ms = (time.perf_counter() - started) * 1000
        ranking = [corpus_id_from_uri(hit.source_uri) for hit in response.results]
        best = {}  # each document of the top 10 at its best chunk, as the metrics rank it
        for corpus_id, hit in zip(ranking, response.results):
            best.setdefault(corpus_id, hit.relevance)
        judgments = dataset.qrels[qid]
        result.judged_relevance += [(best[doc], judgments.get(doc, 0) > 0) for doc in distinct(ranking)[:10]]
        scores = {name: round(value, 6) for name, value in score_query(ranking, dataset.qrels[qid]).items()}
        result.per_query[qid] = {**scores, "latency_ms": round(latency_ms, 2)}
        result.degraded_queries += bool(response.degraded)
        result.dense_skipped_queries += variant.mode == "hybrid" and response.weights.get("vector", 0) == 0
        on_progress(1)
    return result


# --- sweeps: the best fusion settings for a KB --------------------------------------------------------

SWEEP_WEIGHTS = "vector=0.3,0.5,0.7,1,1.5,bm25=1"
SWEEP_RRF_KS = (10, 20, 60)
SWEEP_CANDIDATES = (DEPTH, 2 * DEPTH)  # an evaluation cannot measure fewer than DEPTH: see the command


def best_run(results: Sequence[RunResult]) -> RunResult:
    """The hybrid run with the highest mean nDCG@10; ties go to the higher Recall@100, then the earlier run."""
    hybrid = [result for result in results if result.variant.mode == "hybrid"]
    if not hybrid:
        raise ValueError("a sweep compares hybrid runs: include the hybrid mode")

    def merit(result: RunResult) -> tuple[float, float]:
        metrics = result.summary()["metrics"]
        return metrics["ndcg@10"], metrics["recall@100"]

    return max(hybrid, key=merit)


def suggested_settings(variant: Variant) -> dict:
    """A run's fusion settings as KB search settings (``knowledge.search_settings``): what it set."""
    suggested: dict = {"candidates": variant.candidates}
    if variant.weights is not None:
        suggested["weights"] = dict(variant.weights)
    if variant.fusion is not None:
        suggested["fusion"] = variant.fusion
    if variant.leg_weights is not None:
        suggested["leg_weights"] = variant.leg_weights
    if variant.leg_candidates is not None:
        suggested["leg_candidates"] = variant.leg_candidates
    if variant.rrf_k is not None:
        suggested["rrf_k"] = variant.rrf_k
    if variant.dense_weight_floor is not None:
        suggested["dense_weight_floor"] = variant.dense_weight_floor
    if variant.aggregate is not None:
        suggested["aggregate"] = variant.aggregate
    if variant.feedback is not None:
        keys = ("feedback_docs", "feedback_terms", "feedback_query_weight")
        suggested.update(dict(zip(keys, variant.feedback, strict=True)))
    return suggested


def write_suggested_settings(kb: KnowledgeBase, suggested: dict) -> dict:
    """Onto the KB's active version (the index they were measured on), over its other settings."""
    version = kb.active_version
    return update_search_settings(kb, merged_search_settings(version.search_settings, suggested), version=version)


def labelled_knowledge_base(tenant_name: str, kb_name: str) -> tuple[Tenant, KnowledgeBase]:
    """A tenant's own KB, to evaluate with its labelled queries (``TenantNotFound``, ``KnowledgeBase.DoesNotExist``)."""
    tenant = tenant_by_name(tenant_name)
    return tenant, knowledge_bases_of(tenant).get(name=kb_name)


# --- reports ----------------------------------------------------------------------------------------


def git_commit() -> str | None:
    """The checked-out commit, read from ``.git`` directly (no git binary needed). In a linked worktree
    ``.git`` is a file naming the worktree's own git dir (its HEAD), whose ``commondir`` holds the refs."""
    git_dir = Path(settings.BASE_DIR) / ".git"
    if git_dir.is_file():
        git_dir = git_dir.parent / git_dir.read_text().strip().removeprefix("gitdir: ")
    if not (git_dir / "HEAD").is_file():
        return None
    head = (git_dir / "HEAD").read_text().strip()
    if not head.startswith("ref: "):
        return head
    ref = head.removeprefix("ref: ")
    common = git_dir / (git_dir / "commondir").read_text().strip() if (git_dir / "commondir").is_file() else git_dir
    for refs_dir in (git_dir, common):
        if (refs_dir / ref).is_file():
            return (refs_dir / ref).read_text().strip()
    packed = common / "packed-refs"
    for line in packed.read_text().splitlines() if packed.is_file() else []:
        if line.endswith(f" {ref}"):
            return line.split(" ", 1)[0]
    return None


def build_report(
    dataset: BeirDataset,
    kb: KnowledgeBase,
    results: list[RunResult],
    ingestion: IngestReport | None,
    *,
    command: str | None,
    commit: str | None,
) -> dict:
    """Everything needed to reproduce and compare a run: settings, model, analyzer, commit (read when
    the run started: the code it imported), scores."""
    embedder = get_embedder(kb.embedding_model)
    return {
        "created_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "dataset": {
            "name": dataset.name,
            "path": str(dataset.path),
            "split": dataset.split,
            "corpus_sha256": dataset.corpus_sha256,
            "documents": len(dataset.corpus) if dataset.corpus else None,  # None: the KB's own documents
            "judged_queries": len(dataset.qrels),
            "judged_docs_missing_from_corpus": dataset.missing_judged_docs if dataset.corpus else None,
        },
        "knowledge_base": {
            "tenant": kb.tenant.name,
            "name": kb.name,
            "search_settings": search_settings_of(kb),
            "chunk_size": kb.chunk_size,
            "chunk_overlap": kb.chunk_overlap,
            "languages": kb.languages,
        },
        "model": {"name": kb.embedding_model, "dimension": embedder.dimension, "max_tokens": embedder.max_tokens},
        "analyzer_version": analyzer_for_tenant(kb.tenant_id).version,
        "settings": {
            "top_k": DEPTH,
            "RRF_K": settings.RRF_K,
            "SEARCH_CANDIDATES": settings.SEARCH_CANDIDATES,
            "SEARCH_WEIGHTS": settings.SEARCH_WEIGHTS,
            "SEARCH_WEIGHT_GRAPH_HYBRID": settings.SEARCH_WEIGHT_GRAPH_HYBRID,
            "GRAPH_FUSION_HEAD": settings.GRAPH_FUSION_HEAD,
            "DENSE_WEIGHT_FLOOR": settings.DENSE_WEIGHT_FLOOR,
            "EMBEDDING_BATCH_SIZE": settings.EMBEDDING_BATCH_SIZE,
            "TORCH_THREADS": settings.TORCH_THREADS,
            "EMBEDDING_BACKEND": settings.EMBEDDING_BACKEND,
            "ONNX_THREADS": settings.ONNX_THREADS,
        },
        "ingestion": None
        if ingestion is None
        else {
            **ingestion.as_dict(),
            "chunks_per_s": round(ingestion.chunks / ingestion.seconds, 2) if ingestion.chunks else None,
        },
        "runs": [result.as_dict() for result in results],
    }


def _paired_runs(before: dict, after: dict) -> list[tuple[dict, dict]]:
    """Runs with the same label; then a mode's one leftover run before against each leftover run of
    that mode after (a baseline against a sweep, or reports labelled before and after a change of
    defaults)."""
    earlier = {run["label"]: run for run in before["runs"]}
    pairs = [(earlier.pop(run["label"]), run) for run in after["runs"] if run["label"] in earlier]
    paired = {id(run) for _, run in pairs}
    for mode in MODES:
        left = [run for run in earlier.values() if run["mode"] == mode]
        if len(left) == 1:
            pairs += [(left[0], run) for run in after["runs"] if run["mode"] == mode and id(run) not in paired]
    return pairs


def compare_reports(before: dict, after: dict) -> list[dict]:
    """Per pair of runs, each metric's mean over the queries both runs scored and its delta (after -
    before), and how many of those queries got a better or worse nDCG@10."""
    rows = []
    for base, run in _paired_runs(before, after):
        shared = sorted(base["per_query"].keys() & run["per_query"].keys())
        if not shared:
            continue
        means = [
            {metric: float(np.mean([side["per_query"][q][metric] for q in shared])) for metric in METRICS}
            for side in (base, run)
        ]
        change = [run["per_query"][q]["ndcg@10"] - base["per_query"][q]["ndcg@10"] for q in shared]
        rows.append(
            {
                "label": run["label"] if run["label"] == base["label"] else f"{base['label']} -> {run['label']}",
                "queries": len(shared),
                "before": {metric: round(value, 4) for metric, value in means[0].items()},
                "after": {metric: round(value, 4) for metric, value in means[1].items()},
                "delta": {metric: round(means[1][metric] - means[0][metric], 4) for metric in METRICS},
                "latency_p50_delta_ms": round(run["latency_ms"]["p50"] - base["latency_ms"]["p50"], 2),
                "ndcg@10_better": sum(1 for d in change if d > 1e-9),
                "ndcg@10_worse": sum(1 for d in change if d < -1e-9),
            }
        )
    return rows
