"""Elasticsearch's hybrid search, as a client of a basic node runs it: the chunks' analyzed text in a
``text`` field scored by the same BM25 as ``engines.elasticsearch_index``, their stored MiniLM vectors in a
``dense_vector`` field, and the query embedded by the same model in the client, inside the timed part.

Three forms of one request:

- ``es_sum``: a ``query`` (BM25) and a ``knn`` section in one search, Elasticsearch's documented hybrid on a
  node without x-pack: each hit's score is its BM25 score plus its kNN similarity;
- ``es_rrf_client``: the BM25 ranking and the kNN ranking in one ``_msearch``, fused by the client with
  reciprocal rank fusion (``rrf``: rank constant 60, window = the request's size, the ``rrf``
  retriever's defaults);
- ``es_rrf_retriever``: the ``rrf`` retriever itself, run only where the node has it (x-pack's
  ``rank-rrf`` module; the tests' ``integ-test-zip`` node does not).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

RANK_CONSTANT = 60  # the rrf retriever's default rank_constant
FORMS = ("es_sum", "es_rrf_client", "es_rrf_retriever")
BULK_DOCS = 500


def rrf(rankings: Sequence[Sequence[int]], *, window: int, size: int, rank_constant: int = RANK_CONSTANT) -> list[int]:
    """Reciprocal rank fusion as the ``rrf`` retriever computes it: each ranking's first ``window`` ids
    score ``1 / (rank_constant + rank)`` (rank from 1), summed per id; the ``size`` best. Ties go to the
    id with the better single rank, then to the earlier ranking, so the order is deterministic."""
    if window < 1 or size < 1:
        raise ValueError("window and size must be at least 1")
    scores: dict[int, float] = {}
    best: dict[int, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        for rank, chunk_id in enumerate(ranking[:window], start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (rank_constant + rank)
            best[chunk_id] = min(best.get(chunk_id, (rank, which)), (rank, which))
    return sorted(scores, key=lambda chunk_id: (-scores[chunk_id], best[chunk_id]))[:size]


def index_body(dims: int, vector_index: str) -> dict[str, Any]:
    """Settings and mappings: one shard and the service's BM25 similarity on pre-analyzed text (as
    ``engines.elasticsearch_index``), and a ``dense_vector`` with cosine similarity and ``vector_index``
    (``hnsw``: float vectors like pgvector's; ``int8_hnsw``: Elasticsearch's default since 8.14)."""
    from engines.base import BM25_K1
    from engines.elasticsearch_index import BM25_B, PRE_ANALYZED, SIMILARITY

    return {
        "settings": {
            "number_of_shards": 1,
            "number_of_replicas": 0,
            "refresh_interval": "-1",
            "similarity": {SIMILARITY: {"type": "BM25", "k1": BM25_K1, "b": BM25_B}},
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "body": {"type": "text", "analyzer": PRE_ANALYZED, "similarity": SIMILARITY, "index_options": "freqs"},
                "embedding": {
                    "type": "dense_vector",
                    "dims": dims,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": vector_index},
                },
            },
        },
    }


@dataclass(frozen=True)
class Entry:
    """One chunk as Elasticsearch holds it: the id, the analyzed text, the stored vector."""

    chunk_id: int
    body: str
    vector: Sequence[float]


def build_index(client: Any, name: str, entries: Iterable[Entry], dims: int, vector_index: str) -> int:
    """A fresh index holding ``entries``, refreshed and merged to one segment (one HNSW graph, as
    pgvector's one index); the number of documents."""
    from elasticsearch.helpers import bulk

    client.options(ignore_status=404).indices.delete(index=name)
    client.indices.create(index=name, **index_body(dims, vector_index))

    def actions() -> Iterator[dict[str, Any]]:
        for entry in entries:
            yield {
                "_index": name,
                "_id": str(entry.chunk_id),
                "body": entry.body,
                "embedding": [float(x) for x in entry.vector],
            }

    count, _ = bulk(client.options(request_timeout=600), actions(), chunk_size=BULK_DOCS, raise_on_error=True)
    client.indices.refresh(index=name)
    client.options(request_timeout=3600).indices.forcemerge(index=name, max_num_segments=1)
    client.indices.refresh(index=name)
    return int(count)


def bm25_query(tokens: Sequence[str]) -> dict[str, Any]:
    """The service's Elasticsearch BM25 query: one ``term`` clause per analyzed token (duplicates kept)."""
    if not tokens:
        return {"match_none": {}}
    return {"bool": {"should": [{"term": {"body": token}} for token in tokens], "minimum_should_match": 1}}


class EsHybrid:
    """The three forms against one index; ``search`` embeds the query and returns chunk ids, best first."""

    def __init__(self, client: Any, index: str, embedder: Any, analyzer: Any, *, num_candidates: int) -> None:
        self.client, self.index, self.embedder, self.analyzer = client, index, embedder, analyzer
        self.num_candidates = num_candidates

    def _knn(self, vector: list[float], k: int) -> dict[str, Any]:
        return {
            "field": "embedding",
            "query_vector": vector,
            "k": k,
            "num_candidates": max(k, self.num_candidates),
        }

    def search(self, form: str, text: str, size: int, window: int | None = None) -> list[int]:
        """One query in one form; ``window``: each leg's depth (default: ``size``, the rrf retriever's)."""
        window = max(size, window or size)
        vector = [float(x) for x in self.embedder.embed_query(text)]
        query = bm25_query(self.analyzer.tokens(text))
        if form == "es_sum":
            answer = self.client.search(
                index=self.index, size=size, query=query, knn=self._knn(vector, window), source=False
            )
            return _ids(answer)
        if form == "es_rrf_client":
            answers = self.client.msearch(
                index=self.index,
                searches=[
                    {},
                    {"size": window, "query": query, "_source": False},
                    {},
                    {"size": window, "knn": self._knn(vector, window), "_source": False},
                ],
            )
            rankings = []
            for answer in answers["responses"]:
                if "error" in answer:
                    raise RuntimeError(f"msearch: {answer['error']}")
                rankings.append(_ids(answer))
            return rrf(rankings, window=window, size=size)
        if form == "es_rrf_retriever":
            retriever = {
                "rrf": {
                    "retrievers": [{"standard": {"query": query}}, {"knn": self._knn(vector, window)}],
                    "rank_constant": RANK_CONSTANT,
                    "rank_window_size": window,
                }
            }
            answer = self.client.search(index=self.index, size=size, retriever=retriever, source=False)
            return _ids(answer)
        raise ValueError(f"unknown form {form!r}")

    def rrf_retriever_available(self) -> str:
        """Empty when the node runs the ``rrf`` retriever; else why not (its error)."""
        from elasticsearch import ApiError

        try:
            self.search("es_rrf_retriever", "a test query", 1)
        except ApiError as exc:
            return f"{exc.meta.status}: {str(exc)[:300]}"
        return ""


def _ids(answer: Any) -> list[int]:
    return [int(hit["_id"]) for hit in answer["hits"]["hits"]]
