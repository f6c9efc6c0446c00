"""The readers of ``bench.filtered_scale --acl``: document ACLs that admit a chosen share of the chunks.

Each percentage ``p`` names a group, ``group:acl-<p>``, whose reader may read about ``p`` % of the rows.
ACLs are per document (a chunk carries its document's ACL, as the service copies it), and a document
is in the group of ``p`` when its rank ``(doc * STRIDE) % docs`` is below ``docs * p / 100``: exactly
that many documents, spread over the corpus, independent of the bench's filter fields, and nested
(the 1 % documents are among the 10 % ones). A document in no group has ACL ``["user:other"]``, so no
row stays open to everyone (``*``): a search as a group's reader checks every row's ACL.

The ACLs are written after the load by a few bulk UPDATEs (one per distinct ACL), not through
``knowledge.acls`` (a transaction per document); the caller drops the HNSW index first and rebuilds it
after, since an UPDATE would otherwise insert every row into the graph again.
"""

from __future__ import annotations

import math
import time

import numpy as np

from bench import synthetic
from bench.filtered_scale.peers import CHUNKS_PER_DOC
from bench.harness import http

OTHER = "user:other"  # the ACL of a document no reader of the run may read
MODES = ("vector", "hybrid")  # the modes measured over HTTP as each reader
DIMENSION = 384  # the bench's vectors
STRIDES = (7919, 7927, 7933)  # primes: one of them is coprime with any document count of the bench


def parse_percents(text: str) -> tuple[float, ...]:
    """``"10,1"`` into (10.0, 1.0), largest first; each in (0, 100]."""
    try:
        percents = sorted({float(item) for item in text.split(",") if item.strip()}, reverse=True)
    except ValueError:
        raise SystemExit(f"--acl takes percentages, e.g. 10,1: got {text!r}") from None
    if not percents or not all(0 < p <= 100 for p in percents):
        raise SystemExit(f"--acl percentages are in (0, 100]: got {text!r}")
    return tuple(percents)


def label(percent: float) -> str:
    """``10.0`` -> ``"10"``, ``0.1`` -> ``"0.1"``."""
    return f"{percent:g}"


def principal(percent: float) -> str:
    return f"group:acl-{label(percent)}"


def scenario(percent: float) -> str:
    """The name of the reader's row in the result, beside the filters' names."""
    return f"acl {label(percent)} %"


def _stride(docs: int) -> int:
    return next(s for s in STRIDES if math.gcd(s, docs) == 1)


def admitted_documents(docs: int, percent: float) -> int:
    """How many of ``docs`` documents the reader of ``percent`` may read (at least one)."""
    return max(1, round(docs * percent / 100))


def document_ranks(docs: int) -> np.ndarray:
    """Each document's rank, a permutation of 0..docs-1 (multiplication by a coprime stride)."""
    return (np.arange(docs, dtype=np.int64) * _stride(docs)) % docs


def document_acls(docs: int, percents: tuple[float, ...]) -> list[list[str]]:
    """The ACL of each of ``docs`` documents: the groups admitting it, else ``[OTHER]``."""
    ranks = document_ranks(docs)
    cuts = [(principal(p), admitted_documents(docs, p)) for p in percents]
    return [[name for name, cut in cuts if rank < cut] or [OTHER] for rank in ranks.tolist()]


def row_mask(rows: np.ndarray, docs: int, percent: float) -> np.ndarray:
    """Which of the rows numbered ``rows`` the reader of ``percent`` may read (the exact top 10's mask)."""
    return document_ranks(docs)[rows // CHUNKS_PER_DOC] < admitted_documents(docs, percent)


def write_acls(execute, tenant_id: int, document_ids: list[int], percents: tuple[float, ...]) -> dict:
    """Each document's ACL (``document_ids`` in document-number order) onto it and its chunks, one UPDATE
    per distinct ACL, then the versions' revisions bumped (no cached answer or remembered "open to
    everyone" survives). Returns the seconds it took and the documents per ACL."""
    from knowledge.models import Chunk, Document
    from knowledge.revisions import bump_revisions

    acls = document_acls(len(document_ids), percents)
    groups: dict[tuple[str, ...], list[int]] = {}
    for document_id, acl in zip(document_ids, acls, strict=True):
        groups.setdefault(tuple(acl), []).append(document_id)
    t0 = time.perf_counter()
    for acl, ids in groups.items():
        execute(
            f"UPDATE {Document._meta.db_table} SET acl = %s WHERE tenant_id = %s AND id = ANY(%s)",
            [list(acl), tenant_id, ids],
        )
        execute(
            f"UPDATE {Chunk._meta.db_table} SET acl = %s WHERE tenant_id = %s AND document_id = ANY(%s)",
            [list(acl), tenant_id, ids],
        )
    versions = Chunk.objects.filter(tenant_id=tenant_id).values_list("kb_version_id", flat=True).distinct()
    bump_revisions(list(versions))
    return {
        "update_s": round(time.perf_counter() - t0, 1),
        "documents": {" ".join(acl): len(ids) for acl, ids in groups.items()},
    }


def run(
    args,
    percents: tuple[float, ...],
    *,
    tenant,
    kb,
    execute,
    build_index,
    measure_engine,
    vectors: np.ndarray,
    queries: np.ndarray,
    unfiltered: tuple,
    http_search,
    http_unfiltered: dict,
    http_queries: list[str],
    workdir,
    graphs: tuple[float, ...] = (),
) -> dict:
    """``--acl``: the HNSW index dropped, each document's ACL written (``bench.filtered_scale.acl``), the
    service's index and keyword index rebuilt; then per reader the engine's p50 and recall@10 against the
    exact top 10 of the rows it may read (the unfiltered case beside it, on the same index), and over HTTP
    ``vector`` and ``hybrid`` as each reader (a key with ``act_as`` sending ``principals``), with ratios to
    the unfiltered p50 (over HTTP: this run's earlier ``none`` scenarios, ``http_unfiltered``, taken when
    every row was open to all). ``unfiltered``: the engine's unfiltered case (filter, exact filter, exact
    top 10); ``build_index``, ``measure_engine`` and ``http_search``: the bench's own steps."""

    from engines.pgvector_index import hnsw_index_name
    from knowledge.models import Chunk, Document
    from knowledge.stores import vector_index
    from retrieval.filters import compile_filters
    from retrieval.keyword_filter import exact_field_filter
    from tenants.principals import reader_of

    document_ids = list(Document.objects.filter(knowledge_base=kb).order_by("id").values_list("id", flat=True))
    if len(document_ids) != args.rows // CHUNKS_PER_DOC:
        raise RuntimeError(f"{len(document_ids)} documents for {args.rows:,} rows")
    execute(f"DROP INDEX IF EXISTS {hnsw_index_name(DIMENSION)}")  # else each updated row is inserted into the graph
    out = write_acls(execute, tenant.pk, document_ids, percents)
    t0 = time.perf_counter()
    execute("VACUUM ANALYZE knowledge_chunk")  # the UPDATEs' dead rows
    out["vacuum_s"] = round(time.perf_counter() - t0, 1)
    engine = vector_index()
    out["service_index"] = build_index(engine)
    rows, cases = np.arange(args.rows), {"none": unfiltered}
    out["matching_rows"] = {}
    for percent in percents:
        compiled = compile_filters(None, reader_of([principal(percent)]))
        mask = row_mask(rows, len(document_ids), percent)
        name = scenario(percent)
        out["matching_rows"][name] = int(mask.sum())
        if compiled.apply(Chunk.objects.filter(tenant_id=tenant.pk)).count() != out["matching_rows"][name]:
            raise RuntimeError(f"{name}: SQL and numpy disagree on the rows the reader may read")
        cases[name] = (compiled, exact_field_filter(compiled), synthetic.exact_top_k(vectors, queries, 10, mask))
    if not args.no_keyword:
        t0 = time.perf_counter()
        synthetic.build_keyword_index(kb.active_version)  # its entries carry the ACL terms
        out["lexical_rebuild_s"] = round(time.perf_counter() - t0, 1)

    def measure(readers: tuple[float, ...], key_name: str) -> dict:
        return _measure(
            args,
            readers,
            key_name,
            tenant,
            engine,
            measure_engine,
            cases,
            http_search,
            http_unfiltered,
            http_queries,
            workdir,
        )

    out.update(measure(percents, "bench-act-as"))
    if graphs:
        out["reader_graphs"] = _with_reader_graphs(graphs, tenant, measure)
    return out


def _with_reader_graphs(graphs: tuple[float, ...], tenant, measure) -> dict:
    """``--reader-graphs``: each named reader's principal given its own graph (``manage.py reader_graph``),
    then the engine and HTTP figures again (``measure``), with ratios to the same unfiltered p50s as above."""
    from django.core.management import call_command

    from engines import principal_graphs
    from knowledge.models import Chunk

    out: dict = {"build_s": {}, "graphs": {}}
    for percent in graphs:
        t0 = time.perf_counter()
        call_command("reader_graph", tenant=tenant.pk, principal=principal(percent))
        out["build_s"][scenario(percent)] = round(time.perf_counter() - t0, 1)
    for graph in principal_graphs.listed(Chunk._meta.db_table):
        out["graphs"][graph.principal] = {"rows": graph.rows, "valid": graph.valid}
    out.update(measure(graphs, "bench-act-as-graphs"))
    for percent in graphs:
        call_command("reader_graph", tenant=tenant.pk, principal=principal(percent), drop=True)
    return out


def _measure(
    args, percents, key_name, tenant, engine, measure_engine, cases, http_search, http_unfiltered, http_queries, workdir
) -> dict:
    """The engine's p50 and recall per case (after an untimed pass that reads the index into memory), and
    ``vector`` and ``hybrid`` over HTTP as each reader of ``percents`` (a key with ``act_as`` sending
    ``principals``), with ratios to the unfiltered p50s."""
    from django.urls import reverse

    from tenants.services import create_api_key

    measure_engine(engine, cases)
    out: dict = {"engine": measure_engine(engine, cases)}
    base = out["engine"]["none"]["p50_ms"]
    out["ratios"] = {
        name: {"engine": round(out["engine"][name]["p50_ms"] / base, 2)} for name in cases if name != "none"
    }
    if not args.no_http and not args.no_keyword:
        key = create_api_key(tenant=tenant, name=key_name, scopes=["search", "act_as"]).raw_key
        scenarios = [
            http.Scenario(
                f"{mode} | {scenario(p)}", reverse(f"retrieval-{mode}"), {"rerank": False, "principals": [principal(p)]}
            )
            for p in percents
            for mode in MODES
        ]
        out["http"] = http_search(args, key, http_queries, workdir, scenarios=scenarios)
        for p in percents:
            for mode in MODES:
                now, before = (
                    out["http"]["scenarios"].get(f"{mode} | {scenario(p)}"),
                    http_unfiltered.get(f"{mode} | none"),
                )
                if now and before:
                    out["ratios"][scenario(p)][f"http {mode}"] = round(now["p50_ms"] / before["p50_ms"], 2)
    return out
