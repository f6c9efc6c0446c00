"""Embedding models and the vector (pgvector HNSW) leg."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from retrieval_site.settings.base import CommaList, HttpUrlOrUnset, Lowercase, Ranks, Section


class Embeddings(Section):
    title = "Embeddings and vector search"

    # A name from the bundled aliases (all-MiniLM-L6-v2), a sentence-transformers model folder, or,
    # with EMBEDDING_URL set, the model name sent to that OpenAI-compatible /v1/embeddings endpoint.
    EMBEDDING_MODEL: str = "all-MiniLM-L6-v2"
    EMBEDDING_URL: Annotated[HttpUrlOrUnset, Ranks] = ""
    EMBEDDING_API_KEY: str = ""
    EMBEDDING_TIMEOUT_S: PositiveFloat = 30.0
    EMBEDDING_BATCH_SIZE: PositiveInt = 32
    # Languages of a model the service does not know, e.g. "zh,en": they decide its dense weight.
    EMBEDDING_LANGUAGES: Annotated[CommaList, Ranks] = []
    # gunicorn.conf.py makes it 1 in web workers; other processes (ingest, evaluate) use every core.
    TORCH_THREADS: PositiveInt = Field(default_factory=lambda: os.cpu_count() or 1)
    # Runtime of a local model named without a runtime suffix (':torch', ':onnx', ':onnx-int8'): onnx
    # (ONNX Runtime, fp32: the torch vectors within float rounding, ~3x faster per query) or torch.
    EMBEDDING_BACKEND: Annotated[Literal["onnx", "torch"], Lowercase, Ranks] = "onnx"
    # Exported (and quantized) ONNX graphs, one folder per hash of the model files + export settings.
    ONNX_CACHE_DIR: Path = Field(default_factory=lambda data: data["VAR_DIR"] / "onnx")
    # Threads per process; like TORCH_THREADS (its default): 1 in gunicorn workers, all cores otherwise. One batch
    # (a query) runs on this many intra-op threads; several (an ingestion group) run side by side, one thread each.
    ONNX_THREADS: PositiveInt = Field(default_factory=lambda data: data["TORCH_THREADS"])
    # Texts per ONNX Runtime call (sorted by length first, so they pad little): small batches keep a
    # layer's activations in the CPU cache (docs/BENCHMARKS.md). torch and remote calls use EMBEDDING_BATCH_SIZE.
    ONNX_BATCH_SIZE: PositiveInt = 4
    # Up to this many matching rows a search scans them exactly instead of walking HNSW, in an index of
    # 100k rows; above that the limit grows with the square root of the index's rows (25,298 at 1M). 8,000
    # since vectors sit in their rows (VECTOR_COLUMN_STORAGE main: an exact scan costs half per row).
    VECTOR_EXACT_SCAN_THRESHOLD: Annotated[NonNegativeInt, Ranks] = 8000
    # hnsw.ef_search of a vector search: the larger of this and twice the leg's depth (candidates). Unset:
    # chosen per search from the index's rows and the depth, so recall holds as the KB grows
    # (engines.hnsw_parameters: 200 up to 100k rows for a depth of 100, growing to 1000 at 1M).
    HNSW_EF_SEARCH: Annotated[PositiveInt | None, Ranks] = None
    # Levers of issue 27, each at today's behaviour until a quiet 1M run decides (docs/BENCHMARKS.md,
    # "How to run the 1M benchmark"). pgvector's iterative scan of a filtered graph walk, and how many
    # index tuples it visits before the engine falls back to an exact scan (pgvector's default 20,000).
    HNSW_ITERATIVE_SCAN: Annotated[Literal["relaxed_order", "strict_order"], Lowercase, Ranks] = "relaxed_order"
    HNSW_MAX_SCAN_TUPLES: Annotated[PositiveInt, Ranks] = 20_000
    # m and ef_construction of an HNSW index when it is built; unset: chosen from the rows it indexes
    # (pgvector's 16 / 64 below 300k rows, 24 / 128 from there). An existing index keeps the values it was
    # built with until `manage.py rebuild_vector_index` (online); check_kb and the console say when to.
    HNSW_M: Annotated[int | None, Field(ge=2, le=100)] = None
    HNSW_EF_CONSTRUCTION: Annotated[int | None, Field(ge=4, le=1000)] = None
    # How a filtered search sizes its filter to choose exact scan or graph walk: count the matching rows
    # (up to the exact-scan limit) or take the planner's estimate (no scan, but as good as the statistics).
    VECTOR_FILTER_SIZING: Annotated[Literal["count", "estimate"], Lowercase, Ranks] = "count"
    # Storage of the chunk table's vector column: main keeps each vector in its row (out of line only when
    # a row cannot fit a page), so an exact scan reads no TOAST (1.5-2x faster: docs/BENCHMARKS.md);
    # external is pgvector's own default (out of line past ~2 KB a row); plain is in the row always (up to
    # ~1,900 dims). Applied after every migrate; rows already written keep theirs until the table is
    # rewritten (knowledge 0023 does it once for main or plain: VACUUM FULL knowledge_chunk).
    VECTOR_COLUMN_STORAGE: Annotated[Literal["external", "extended", "main", "plain"], Lowercase] = "main"
    # Where the vectors are searched: pgvector (the chunk table) or Milvus (engines/milvus_index.py), at
    # MILVUS_URI: a server (http://host:19530) or a local file, which opens the embedded Milvus Lite (it serves
    # the one process that opened the file: the tests; a service with workers needs a server).
    VECTOR_BACKEND: Annotated[Literal["pgvector", "milvus"], Lowercase, Ranks] = "pgvector"
    MILVUS_URI: str = Field(default_factory=lambda data: str(data["VAR_DIR"] / "milvus.db"))
    MILVUS_TIMEOUT_S: PositiveFloat = 5.0  # the deadline of every Milvus call
