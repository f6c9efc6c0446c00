"""The filters of ``bench.filtered_scale`` and the engines a user would pick instead of this service,
searched with the same vectors, the same filters and the same k on the same machine.

Each filter is written once per engine: the service's filter JSON, a numpy mask over the rows (the
exact top-10 and FAISS's prefilter), LanceDB's SQL and Qdrant's filter. The fields are functions of the
row number ``g`` (``CHUNKS_PER_DOC`` rows a document): ``segment = g % 10`` (10 %), ``campaign = g % 100``
(1 %), ``cohort = g % 1000`` (0.1 %), and per document a creation day ``(g // 100) % 1000`` (a 50-day
range: 5 %) and one tag ``t<(g // 100) % 100>`` (two tags: 2 %).

The peers (``bench/requirements.txt``; none is a dependency of the service or its tests):

* LanceDB (embedded, on disk under the bench's work folder): IVF_HNSW_SQ on cosine, or no vector index
  (``--lancedb-index none``: an exact scan), scalar indexes on the filter columns, ``prefilter=True``.
* FAISS ``IndexHNSWFlat`` (inner product on unit vectors = cosine) with the filter as an
  ``IDSelectorBitmap`` prefilter, the bitmap made from the rows' fields per query (inside the time:
  it is the metadata filter a FAISS user runs beside it). HNSW with a selective prefilter loses recall
  (the walk rarely meets the allowed rows); ``--faiss-exact-below N`` scans filters of up to N rows
  exactly in numpy instead, as the service does below its exact-scan limit.
* Qdrant in local mode (``QdrantClient(":memory:")``, the client's own numpy search with payload
  filters in Python). Qdrant says local mode is for small collections; the bench skips it above
  ``--qdrant-max-rows``.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODES = ("vector", "bm25", "hybrid")  # the search endpoints measured for each filter
CHUNKS_PER_DOC = 100
BASE_DAY = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)  # created_at of day 0
DAYS, TAGS = 1000, 100
DATE_RANGE = (100, 150)  # days [100, 150): 5 % of the documents
TAG_IN = ("t3", "t4")  # 2 % of the documents


@dataclass(frozen=True)
class Fields:
    """Each row's filter fields (arrays indexed by row number)."""

    segment: np.ndarray
    campaign: np.ndarray
    cohort: np.ndarray
    day: np.ndarray
    tag: np.ndarray  # the number of the row's one tag

    @classmethod
    def of(cls, g: np.ndarray) -> Fields:
        """The fields of rows numbered ``g``."""
        doc = g // CHUNKS_PER_DOC
        return cls(g % 10, g % 100, g % 1000, doc % DAYS, doc % TAGS)


def row_metadata(g: int) -> dict:
    return {"segment": g % 10, "campaign": g % 100, "cohort": g % 1000}


def document_labels(doc: int) -> tuple[dt.datetime, list[str]]:
    """created_at and tags of document ``doc`` (its chunks carry both)."""
    return BASE_DAY + dt.timedelta(days=doc % DAYS), [f"t{doc % TAGS}"]


def _day(n: int) -> str:
    return (BASE_DAY + dt.timedelta(days=n)).date().isoformat()


@dataclass(frozen=True)
class Filter:
    name: str
    service: dict | None
    mask: Callable[[Fields], np.ndarray]
    lance: str | None
    qdrant: Callable[[object], object | None]  # qdrant_client.models -> its Filter


FILTERS = [
    Filter("none", None, lambda f: np.ones(len(f.segment), dtype=bool), None, lambda m: None),
    Filter(
        "segment 10 %",
        {"metadata.segment": 3},
        lambda f: f.segment == 3,
        "segment = 3",
        lambda m: m.Filter(must=[m.FieldCondition(key="segment", match=m.MatchValue(value=3))]),
    ),
    Filter(
        "campaign 1 %",
        {"metadata.campaign": 7},
        lambda f: f.campaign == 7,
        "campaign = 7",
        lambda m: m.Filter(must=[m.FieldCondition(key="campaign", match=m.MatchValue(value=7))]),
    ),
    Filter(
        "cohort 0.1 %",
        {"metadata.cohort": 7},
        lambda f: f.cohort == 7,
        "cohort = 7",
        lambda m: m.Filter(must=[m.FieldCondition(key="cohort", match=m.MatchValue(value=7))]),
    ),
    Filter(
        "date range 5 %",
        {"created_at": {"gte": _day(DATE_RANGE[0]), "lt": _day(DATE_RANGE[1])}},
        lambda f: (f.day >= DATE_RANGE[0]) & (f.day < DATE_RANGE[1]),
        f"day >= {DATE_RANGE[0]} AND day < {DATE_RANGE[1]}",
        lambda m: m.Filter(must=[m.FieldCondition(key="day", range=m.Range(gte=DATE_RANGE[0], lt=DATE_RANGE[1]))]),
    ),
    Filter(
        "tag in 2 %",
        {"tags": {"any": list(TAG_IN)}},
        lambda f: np.isin(f.tag, [int(t[1:]) for t in TAG_IN]),
        "array_has_any(tags, [" + ", ".join(f"'{t}'" for t in TAG_IN) + "])",
        lambda m: m.Filter(must=[m.FieldCondition(key="tags", match=m.MatchAny(any=list(TAG_IN)))]),
    ),
]


class LanceDBPeer:
    name = "LanceDB"

    def __init__(self, workdir: Path, index: str, ef: int, nprobes: int, refine_factor: int):
        self.path, self.index, self.ef, self.nprobes, self.refine = (
            workdir / "lancedb",
            index,
            ef,
            nprobes,
            refine_factor,
        )

    def build(self, vectors: np.ndarray, fields: Fields) -> dict:
        import lancedb
        import pyarrow as pa
        from lancedb.index import BTree, IvfHnswSq, LabelList

        shutil.rmtree(self.path, ignore_errors=True)
        started = time.perf_counter()
        db = lancedb.connect(str(self.path))
        n, dim = vectors.shape
        self.table = None
        for first in range(0, n, 100_000):  # appended in slices: no second full copy in Arrow
            stop = min(first + 100_000, n)
            batch = pa.table(
                {
                    "id": pa.array(np.arange(first, stop), pa.int64()),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors[first:stop].ravel()), dim),
                    **{
                        c: pa.array(getattr(fields, c)[first:stop], pa.int32())
                        for c in ("segment", "campaign", "cohort", "day")
                    },
                    "tags": pa.array([[f"t{t}"] for t in fields.tag[first:stop]], pa.list_(pa.string())),
                }
            )
            if self.table is None:
                self.table = db.create_table("chunks", data=batch, mode="overwrite")
            else:
                self.table.add(batch)
        loaded = time.perf_counter() - started
        if self.index == "ivf_hnsw_sq":
            self.table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
        for column in ("segment", "campaign", "cohort", "day"):
            self.table.create_index(column, config=BTree())
        self.table.create_index("tags", config=LabelList())
        return {
            "load_s": round(loaded, 1),
            "index_s": round(time.perf_counter() - started - loaded, 1),
            "disk_mb": round(sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file()) / 2**20),
            "index": self.index,
            "ef": self.ef,
            "nprobes": self.nprobes,
            "refine_factor": self.refine,
        }

    def search(self, query: np.ndarray, flt: Filter, fields: Fields, k: int) -> list[int]:
        q = self.table.search(query).distance_type("cosine").limit(k).select(["id", "_distance"])
        if self.index != "none":
            q = q.ef(self.ef).nprobes(self.nprobes)
            if self.refine:
                q = q.refine_factor(self.refine)
        if flt.lance:
            q = q.where(flt.lance, prefilter=True)
        return q.to_arrow()["id"].to_pylist()


class FaissPeer:
    name = "FAISS HNSW + IDSelector"

    def __init__(self, m: int, ef_construction: int, ef_search: int, exact_below: int):
        self.m, self.ef_construction, self.ef_search, self.exact_below = m, ef_construction, ef_search, exact_below

    def build(self, vectors: np.ndarray, fields: Fields) -> dict:
        import faiss

        started = time.perf_counter()
        self.index = faiss.IndexHNSWFlat(vectors.shape[1], self.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = self.ef_construction
        self.index.add(vectors)
        self.vectors = vectors
        return {
            "index_s": round(time.perf_counter() - started, 1),
            "m": self.m,
            "ef_construction": self.ef_construction,
            "ef_search": self.ef_search,
            "exact_below": self.exact_below,
        }

    def search(self, query: np.ndarray, flt: Filter, fields: Fields, k: int) -> list[int]:
        import faiss

        params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k))
        if flt.service is not None:
            mask = flt.mask(fields)
            if mask.sum() <= self.exact_below:  # as the service does: a small filter is scanned exactly
                rows = np.flatnonzero(mask)
                return rows[np.argsort(-(self.vectors[rows] @ query))[:k]].tolist()
            bitmap = np.packbits(mask, bitorder="little")  # kept alive until the search returns
            params.sel = faiss.IDSelectorBitmap(len(fields.segment), faiss.swig_ptr(bitmap))
        _, ids = self.index.search(query[None, :], k, params=params)
        return [int(i) for i in ids[0] if i >= 0]


class QdrantLocalPeer:
    name = "Qdrant local mode"

    def build(self, vectors: np.ndarray, fields: Fields) -> dict:
        from qdrant_client import QdrantClient, models

        started = time.perf_counter()
        self.models, self.client = models, QdrantClient(":memory:")
        self.client.create_collection(
            "chunks", vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.COSINE)
        )
        for first in range(0, len(vectors), 10_000):
            stop = min(first + 10_000, len(vectors))
            payloads = [
                {c: int(getattr(fields, c)[g]) for c in ("segment", "campaign", "cohort", "day")}
                | {"tags": [f"t{fields.tag[g]}"]}
                for g in range(first, stop)
            ]
            self.client.upload_collection("chunks", vectors[first:stop], payload=payloads, ids=range(first, stop))
        return {"load_s": round(time.perf_counter() - started, 1)}

    def search(self, query: np.ndarray, flt: Filter, fields: Fields, k: int) -> list[int]:
        points = self.client.query_points("chunks", query=query, query_filter=flt.qdrant(self.models), limit=k)
        return [int(p.id) for p in points.points]
