"""The stages of an ingestion, timed for bench/ingest/ (and bench/lifecycle/'s in-process pass) by
wrappers installed for the bench only and restored after, and the graph stage switched off."""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict


class Timings:
    """Accumulated seconds and call counts of wrapped callables."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started
                self.calls[name] += 1

        return wrapper


# Stages timed by wrappers: (owner, attribute, label). Missing attributes are skipped, so the script
# keeps working while the ingestion code evolves.
_CLASS_STAGES = [
    ("Ingester", "__init__", "init"),
    ("Ingester", "_prepare", "prepare"),
    ("Ingester", "_flush", "flush"),
    ("Ingester", "_write_embedded", "write"),
    ("Ingester", "_upsert_documents", "upsert"),
]
_MODULE_STAGES = [
    ("parse_file", "parse"),
    ("chunk_sections", "chunk"),
    ("apply_pending_lexical_changes", "lexical"),
    ("bump_revisions", "bump_revision"),
]


@contextlib.contextmanager
def instrumented(embedder, timings: Timings, groups: list[list[str]]):
    """Time the ingestion stages without touching production code; everything is restored on exit."""
    from knowledge.ingestion import pipeline

    restore = []

    def patch(owner, attribute, label):
        original = owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
        if original is None:
            return
        restore.append((owner, attribute, original))
        setattr(owner, attribute, timings.wrap(label, original))

    for owner_name, attribute, label in _CLASS_STAGES:
        patch(getattr(pipeline, owner_name), attribute, label)
    for attribute, label in _MODULE_STAGES:
        patch(pipeline, attribute, label)
    patch(type(pipeline.vector_index()), "write", "copy")
    patch(type(pipeline.graph_store()), "write", "graph_writes")

    embed = embedder.embed_documents

    def recording_embed(texts):
        groups.append(list(texts))
        return embed(texts)

    embedder.embed_documents = timings.wrap("embed", recording_embed)
    embedder.count_tokens = timings.wrap("count_tokens", embedder.count_tokens)

    # The analyzer (jieba tokens for the lexical index) is created per Ingester; wrap it on creation.
    init = pipeline.Ingester.__init__
    analyzers = []

    def init_and_wrap_analyzer(self, *args, **kwargs):
        init(self, *args, **kwargs)
        analyzer = getattr(self, "analyzer", None)
        if (
            analyzer is not None
            and hasattr(analyzer, "analyze")
            and "analyze" not in getattr(analyzer, "__dict__", {"analyze": 1})
        ):
            try:
                analyzer.analyze = timings.wrap("analyze", analyzer.analyze)
                analyzers.append(analyzer)
            except (AttributeError, TypeError):
                pass  # slotted or frozen analyzer: its time stays inside _prepare
        extractor = getattr(self, "extractor", None)  # the graph's entity extraction, per Ingester too
        if extractor is not None:
            extractor.extract = timings.wrap("extract", extractor.extract)

    pipeline.Ingester.__init__ = init_and_wrap_analyzer
    try:
        yield
    finally:
        pipeline.Ingester.__init__ = init
        for owner, attribute, original in reversed(restore):
            setattr(owner, attribute, original)
        for name in ("embed_documents", "count_tokens"):
            embedder.__dict__.pop(name, None)
        for analyzer in analyzers:
            analyzer.__dict__.pop("analyze", None)


@contextlib.contextmanager
def graph_stage_off():
    """Ingestion without its graph stage (a bench-only switch): every passage gets an empty extraction
    and the graph store writes nothing; everything is restored on exit."""
    from engines.base import Extraction
    from knowledge.ingestion import pipeline

    class NoGraph:
        def write(self, *args, **kwargs) -> None:
            pass

        def delete(self, *args, **kwargs) -> None:
            pass

    def no_extraction(self, pending) -> None:
        for doc in pending:
            doc.extractions = [Extraction(())] * len(doc.drafts)

    saved = pipeline.Ingester._extract, pipeline.graph_store
    pipeline.Ingester._extract, pipeline.graph_store = no_extraction, NoGraph
    try:
        yield
    finally:
        pipeline.Ingester._extract, pipeline.graph_store = saved


STAGE_LABELS = [
    ("init", "Ingester() (analyzer lookup)"),
    ("prepare", "_prepare per file (read, md5, parse, chunk, analyze)"),
    ("parse", "  parse_file"),
    ("chunk", "  chunk_sections"),
    ("count_tokens", "    of which count_tokens"),
    ("analyze", "  analyzer.analyze (lexical tokens)"),
    ("flush", "_flush per EMBED_FLUSH_CHUNKS chunks (start embedding it, write the group before)"),
    ("write", "  _write_embedded (wait for the group's vectors, then write it)"),
    ("upsert", "    _upsert_documents (one INSERT .. ON CONFLICT)"),
    ("copy", "    VectorIndex.write (one COPY per flush)"),
    ("lexical", "    apply_pending_lexical_changes (tantivy, after the commit)"),
    ("bump_revision", "    bump_revisions"),
    ("graph_writes", "    GraphStore.delete / write (the old passages' graph out, the new ones' in)"),
    ("embed", "embed_documents (in the embedding thread: overlaps the stages above)"),
    ("extract", "extractor.extract (graph entities and relations, in the extraction thread: overlaps too)"),
]
