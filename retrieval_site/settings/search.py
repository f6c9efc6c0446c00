"""The keyword leg, fusion and query expansion: how a search finds and orders passages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from retrieval_site.settings.base import CommaList, HttpUrlOrUnset, Ranks, Section
from retrieval_site.settings.database import database_name


class Search(Section):
    title = "Keyword search, fusion and expansion"

    ELASTICSEARCH_URL: Annotated[HttpUrlOrUnset, Ranks] = ""  # set: Elasticsearch; unset: embedded tantivy
    ELASTICSEARCH_INDEX_PREFIX: str = "retrieval"
    # tantivy indexes live per database, so test databases never read the service's indexes.
    LEXICAL_INDEX_DIR: Path = Field(
        default_factory=lambda data: data["VAR_DIR"] / "lexical" / database_name(data["DATABASE_URL"])
    )
    ANALYZER_STOPWORDS: Annotated[CommaList, Ranks] = []  # replaces Lucene's English stopwords when set
    ANALYZER_EXTRA_STOPWORDS: Annotated[CommaList, Ranks] = []
    # With filters, BM25 searches within the matching chunk ids when there are at most this many; above,
    # it searches deeper without them and filters its hits (slower at 10,000 ids: docs/BENCHMARKS.md).
    LEXICAL_FILTER_MAX_IDS: Annotated[PositiveInt, Ranks] = 50_000
    # With filters, BM25 filters inside the keyword index when its entries carry the business fields
    # (indexes built or rebuilt since they exist); off: always through the chunk ids above.
    LEXICAL_FILTER_IN_INDEX: bool = True
    # Threads per process that search a leg's query variants (expansions) beside each other; each keeps at
    # most one database connection of its own.
    SEARCH_VARIANT_THREADS: PositiveInt = 4
    RRF_K: Annotated[PositiveInt, Ranks] = 60
    SEARCH_CANDIDATES: Annotated[PositiveInt, Ranks] = 100  # per-retriever depth (tuned: docs/BENCHMARKS.md)
    SEARCH_WEIGHT_VECTOR: NonNegativeFloat = 1.0  # read as SEARCH_WEIGHTS (the Django settings module)
    SEARCH_WEIGHT_BM25: NonNegativeFloat = 1.0
    SEARCH_WEIGHT_GRAPH: NonNegativeFloat = 1.0  # the graph leg's weight in graph mode
    # The graph list's weight in three-way hybrid ("graph": true); measured in docs/BENCHMARKS.md.
    SEARCH_WEIGHT_GRAPH_HYBRID: Annotated[NonNegativeFloat, Ranks] = 0.1
    # Dense weight for queries in a language the KB's embedding model does not cover (0 skips the leg).
    DENSE_WEIGHT_FLOOR: Annotated[NonNegativeFloat, Ranks] = 0.0
    SPELLING_WEIGHT: Annotated[NonNegativeFloat, Ranks] = 0.7
    SPELLING_MAX_VOCABULARY: Annotated[PositiveInt, Ranks] = 50_000  # a KB's most frequent terms it knows
    # Search analytics (retrieval.search_log): each tenant's queries (text, mode, KBs, hit count, best
    # relevance, leg agreement; no key, no client) are kept this long, then purged by the hourly beat task.
    # A tenant's "record searches" switch (the admin) turns it off for that tenant; SEARCH_LOG_ENABLED
    # false for every tenant. Rows are written off the request thread: a queue of at most
    # SEARCH_LOG_QUEUE_SIZE waits for the writer, which inserts up to SEARCH_LOG_BATCH_SIZE rows at a time,
    # at least every SEARCH_LOG_FLUSH_S seconds (0: no writer thread, rows wait for flush(): tests). A full
    # queue drops the search's row (counted in retrieval_search_log_dropped) rather than wait.
    SEARCH_LOG_ENABLED: bool = True
    SEARCH_LOG_RETENTION_DAYS: NonNegativeInt = 30
    SEARCH_LOG_QUEUE_SIZE: PositiveInt = 10_000
    SEARCH_LOG_BATCH_SIZE: PositiveInt = 500
    SEARCH_LOG_FLUSH_S: NonNegativeFloat = 1.0
