"""BM25 on an Elasticsearch cluster: one index per KB version, reached through an alias.

Every read and write goes through the alias ``{prefix}-kbv-{version}``, which points at one concrete
index ``{prefix}-kbv-{version}-{generation}``. A rebuild fills a new generation out of sight and then
swaps the alias and deletes the old generation in one atomic ``_aliases`` call, so searches see the
old index until the new one is complete, and a failed rebuild leaves the old one serving.

Text arrives analyzed (see ``engines.analysis``); the ``body`` analyzer only splits on whitespace,
so Elasticsearch indexes exactly the tokens tantivy indexes. Scoring is Lucene's BM25 (k1 = 1.2,
b = 0.75) on one shard, so collection statistics are exact. A ``BM25`` similarity configured in the index
settings is Elasticsearch's ``LegacyBM25Similarity``, which keeps the constant ``(k1 + 1)`` factor that
Lucene 8 dropped and tantivy keeps: the two engines give the same scores, not only the same ranking.

Business-field filters (``engines.lexical_filter``) run in the bool query's filter context, on the
``keyword`` field ``filters`` and the ``long`` field ``created_at``; a generation's ``_meta`` says
whether its entries carry them (generations built before they existed do not, until rebuilt).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from elasticsearch import (
    ApiError,
    BadRequestError,
    ConnectionTimeout,
    Elasticsearch,
    NotFoundError,
    TransportError,
)
from elasticsearch.dsl import Index, Mapping, Search
from elasticsearch.dsl.field import Keyword, Long, Text
from elasticsearch.dsl.query import Bool, MatchAll, MatchNone, Query, Range, Term, Terms
from elasticsearch.helpers import BulkIndexError, bulk, scan

from engines import lexical_filter as lf
from engines.base import BM25_K1, IndexState, LexicalDocument, LexicalHit, LexicalIndex, LexicalIndexError, bm25_ceiling
from engines.deadline import DeadlineExceeded, within

SIMILARITY = "retrieval_bm25"
BM25_B = 0.75
# Text is analyzed by our own analyzer: split on whitespace and change nothing (no lowercasing, no stemming).
# The built-in ``whitespace`` analyzer is exactly that, and it lives in the server itself: a custom analyzer
# naming the ``whitespace`` tokenizer needs the ``analysis-common`` module, which a minimal node lacks.
PRE_ANALYZED = "whitespace"
BULK_CHUNK_DOCS = 500
T = TypeVar("T")


def _index_definition(name: str, state: dict[str, str]) -> Index:
    """Settings and mapping of one generation; ``_meta`` records what built it (kept by later writes)."""
    mapping = Mapping()
    mapping.meta("_meta", state)
    mapping.meta("dynamic", "strict")
    for field in ("chunk_id", "doc_id", "tenant_id"):
        mapping.field(field, Long())
    mapping.field("body", Text(analyzer=PRE_ANALYZED, similarity=SIMILARITY, index_options="freqs"))
    mapping.field("filters", Keyword())
    mapping.field("created_at", Long())
    index = Index(name)
    index.settings(
        # One shard: BM25 statistics over the whole version, as tantivy computes them.
        number_of_shards=1,
        # Only our explicit refresh publishes changes, so a document's delete and re-add appear together.
        refresh_interval="-1",
        similarity={SIMILARITY: {"type": "BM25", "k1": BM25_K1, "b": BM25_B}},
    )
    index.mapping(mapping)
    return index


def _state_of(analyzer_version: str, dictionary_fingerprint: str) -> dict[str, str]:
    return {
        "analyzer_version": analyzer_version,
        "dictionary_fingerprint": dictionary_fingerprint,
        "filters": str(lf.FILTER_FIELDS_LEVEL),
    }


def _level(meta: dict[str, str]) -> int:
    """What an index's entries carry (``lexical_filter.FILTER_FIELDS_LEVEL``): 0 none, 1 business fields, 2 and ACLs."""
    level = str(meta.get("filters", ""))
    return int(level) if level.isdigit() else 0


def _source(chunk: LexicalDocument, with_filters: bool) -> dict[str, object]:
    source: dict[str, object] = {
        "chunk_id": chunk.chunk_id, "doc_id": chunk.doc_id, "tenant_id": chunk.tenant_id, "body": chunk.text
    }  # fmt: skip
    if with_filters and chunk.fields is not None:
        source |= {"filters": list(chunk.fields.terms), "created_at": chunk.fields.created_at_us}
    return source


def _filter_query(node: lf.LexicalFilter) -> Query:
    """A business-field filter in Elasticsearch's query DSL (used in filter context: it never scores)."""
    match node:
        case lf.Terms(values):
            return Terms(filters=list(values)) if values else MatchNone()
        case lf.DocIds(ids):
            return Terms(doc_id=list(ids)) if ids else MatchNone()
        case lf.CreatedRange(lower, upper, include_lower, include_upper):
            bounds: dict[str, int] = {}
            if lower is not None:
                bounds["gte" if include_lower else "gt"] = lower
            if upper is not None:
                bounds["lte" if include_upper else "lt"] = upper
            return Range(created_at=bounds) if bounds else MatchAll()
        case lf.And(parts):
            return Bool(filter=[_filter_query(part) for part in parts])
        case lf.Or(parts):
            return Bool(should=[_filter_query(part) for part in parts], minimum_should_match=1)
        case lf.Not(part):
            return Bool(must_not=[_filter_query(part)])
    raise TypeError(f"not a lexical filter: {node!r}")


class ElasticsearchLexicalIndex(LexicalIndex):
    name = "elasticsearch"

    def __init__(
        self,
        url: str,
        prefix: str = "retrieval",
        *,
        request_timeout_s: float = 5.0,
        write_timeout_s: float = 120.0,
        max_retries: int = 2,
        search_deadline_s: float = 2.0,
    ):
        """Connects lazily: building the engine (e.g. at import or in a test) does no network I/O.
        A search, retries included, ends within ``search_deadline_s`` (cause ``deadline``)."""
        self.url = url
        self.prefix = prefix.lower()  # index names must be lowercase
        self.request_timeout_s = request_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_retries = max_retries
        self.search_deadline_s = search_deadline_s
        self._client: Elasticsearch | None = None
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    @property
    def client(self) -> Elasticsearch:
        with self._guard:
            if self._client is None:
                # A timed-out search is not retried: the search path would rather degrade than wait twice.
                self._client = Elasticsearch(
                    self.url,
                    request_timeout=self.request_timeout_s,
                    max_retries=self.max_retries,
                    retry_on_timeout=False,
                )
            return self._client

    # --- writes ---------------------------------------------------------------------------------

    def write(
        self,
        version_id: int,
        entries: list[LexicalDocument],
        *,
        replacing: Sequence[int] = (),
        analyzer_version: str,
        dictionary_fingerprint: str,
    ) -> None:
        alias = self._alias(version_id)
        with self._version_lock(version_id), _translated_errors("replace documents"):
            created = self._ensure_index(version_id, _state_of(analyzer_version, dictionary_fingerprint))
            if replacing:
                self._delete(alias, replacing, refresh=False)
            self._bulk_index(alias, entries, with_filters=created or _level(self._meta(alias)) >= 1)
            self._writer().indices.refresh(index=alias)

    def delete(self, version_id: int, doc_ids: Sequence[int]) -> None:
        alias = self._alias(version_id)
        with self._version_lock(version_id), _translated_errors("delete documents"):
            if doc_ids and self._writer().indices.exists_alias(name=alias):
                self._delete(alias, doc_ids, refresh=True)

    def build_version(
        self, version_id: int, entries: Iterable[LexicalDocument], *, analyzer_version: str, dictionary_fingerprint: str
    ) -> int:
        alias = self._alias(version_id)
        target = f"{alias}-{time.time_ns()}"
        with self._version_lock(version_id), _translated_errors("rebuild"):
            writer = self._writer()
            _index_definition(target, _state_of(analyzer_version, dictionary_fingerprint)).create(using=writer)
            try:
                count = self._bulk_index(target, entries, with_filters=True)
                writer.indices.refresh(index=target)
                swap = [{"add": {"index": target, "alias": alias}}]
                swap += [{"remove_index": {"index": old}} for old in self._indices_behind(alias)]
                writer.indices.update_aliases(actions=swap)
            except BaseException:
                with contextlib.suppress(ApiError, TransportError):  # best effort; drop_version() also removes orphans
                    writer.options(ignore_status=404).indices.delete(index=target)
                raise
        return count

    def switch_version(self, previous_id: int | None, version_id: int) -> None:
        """No-op: each version has its own alias, and a search names its version."""

    def drop_version(self, version_id: int) -> None:
        with self._version_lock(version_id), _translated_errors("drop"):
            writer = self._writer()
            # Every generation, including orphans of an interrupted rebuild; names, since
            # clusters refuse wildcard deletes by default (action.destructive_requires_name).
            names = list(writer.indices.get_alias(index=f"{self._alias(version_id)}-*", expand_wildcards="all"))
            if names:
                writer.options(ignore_status=404).indices.delete(index=",".join(names))

    # --- reads ----------------------------------------------------------------------------------

    def ping(self) -> str:
        with _translated_errors("answer a ping"):
            # The cluster's health, not its root info: a minimal node answers GET / with 405.
            health = self.client.cluster.health()
        return f"Elasticsearch cluster {health['cluster_name']} answers ({health['status']})"

    def state(self, version_id: int) -> IndexState | None:
        alias = self._alias(version_id)

        def read() -> tuple[dict[str, str], int]:
            return self._meta(alias), self.client.count(index=alias)["count"]

        with _translated_errors("read the index state"):
            try:
                meta, count = self._within_deadline("read the index state", read)
            except NotFoundError:
                return None
        # An index without our _meta was not built here: report an unknown analyzer, i.e. stale.
        level = _level(meta)
        return IndexState(
            meta.get("analyzer_version", ""), meta.get("dictionary_fingerprint", ""), count, level >= 1, level >= 2
        )

    def chunk_ids(self, version_id: int) -> list[int]:
        with _translated_errors("list chunk ids"):
            try:
                everything: dict[str, object] = {"query": {"match_all": {}}}
                hits = scan(self._writer(), index=self._alias(version_id), query=everything, _source=False)
                return [int(hit["_id"]) for hit in hits]
            except NotFoundError:
                return []

    def search(
        self,
        version_id: int,
        tenant_id: int,
        tokens: list[str],
        limit: int,
        allowed_chunk_ids: list[int] | None,
        weights: list[float] | None = None,
        field_filter: lf.LexicalFilter | None = None,
    ) -> list[LexicalHit]:
        if not tokens or limit <= 0 or allowed_chunk_ids == []:
            return []
        filters: list[Query] = [Term(tenant_id=tenant_id)]
        if allowed_chunk_ids is not None:
            filters.append(Terms(chunk_id=list(allowed_chunk_ids)))
        if field_filter is not None:
            filters.append(_filter_query(field_filter))
        # One clause per token, duplicates kept: a repeated query token counts twice, as in tantivy.
        # Filters never score; with a filter present, minimum_should_match would default to 0.
        clauses = [Term(body=token) for token in tokens]
        if weights is not None:
            clauses = [Term(body={"value": t, "boost": w}) for t, w in zip(tokens, weights, strict=True)]
        query = Bool(should=clauses, minimum_should_match=1, filter=filters)
        request = (
            Search(using=self.client, index=self._alias(version_id))
            .query(query)
            .extra(size=limit, track_total_hits=False)
            .source(False)
        )
        with _translated_errors("search"):
            try:
                response = self._within_deadline("search", request.execute)
            except NotFoundError:
                return []
        return [LexicalHit(chunk_id=int(hit.meta.id), score=hit.meta.score) for hit in response]

    def max_score(self, version_id: int, tokens: list[str], weights: list[float] | None = None) -> float:
        """Document frequencies from the term vectors of an artificial document made of the tokens
        (one shard per index, so they are the index's own)."""
        if not tokens:
            return 0.0
        with _translated_errors("read term statistics"):
            try:
                response = self._within_deadline(
                    "read term statistics",
                    lambda: self.client.termvectors(
                        index=self._alias(version_id),
                        doc={"body": " ".join(tokens)},
                        fields=["body"],
                        term_statistics=True,
                        field_statistics=True,
                        positions=False,
                        offsets=False,
                    ),
                )
            except NotFoundError:
                return 0.0
        vectors = response.get("term_vectors", {}).get("body")
        if not vectors:
            return 0.0
        terms = vectors.get("terms", {})
        frequencies = [terms.get(token, {}).get("doc_freq", 0) for token in tokens]
        return bm25_ceiling(vectors["field_statistics"]["doc_count"], frequencies, scale=BM25_K1 + 1, weights=weights)

    # --- internals ------------------------------------------------------------------------------

    def _within_deadline(self, action: str, call: Callable[[], T]) -> T:
        """A read of the search path (state, term statistics, the search) within the search's total
        deadline: a frozen node must not hold a search for the client's own, longer request timeout."""
        try:
            return within(self.search_deadline_s, call)
        except DeadlineExceeded as exc:
            raise LexicalIndexError("deadline", f"Elasticsearch ({action}): {exc}") from exc

    def _alias(self, version_id: int) -> str:
        return f"{self.prefix}-kbv-{int(version_id)}"

    def _version_lock(self, version_id: int) -> threading.Lock:
        """Serializes this process's writes to a version, so a delete-then-add is never interleaved."""
        with self._guard:
            return self._locks.setdefault(version_id, threading.Lock())

    def _writer(self) -> Elasticsearch:
        """The client with the longer timeout that bulk loads and delete-by-query need."""
        return self.client.options(request_timeout=self.write_timeout_s)

    def _meta(self, alias: str) -> dict[str, str]:
        """The ``_meta`` of the generation behind an alias (raises ``NotFoundError`` without one)."""
        mappings = self.client.indices.get_mapping(index=alias)
        return dict(next(iter(mappings.values()))["mappings"].get("_meta", {}))

    def _ensure_index(self, version_id: int, state: dict[str, str]) -> bool:
        """Creates generation 0 behind the alias on the first write (then True); its fixed name makes
        concurrent first writers (other processes) converge on one index instead of two behind one alias."""
        alias = self._alias(version_id)
        if self.client.indices.exists_alias(name=alias):
            return False
        definition = _index_definition(f"{alias}-0", state)
        definition.aliases(**{alias: {}})
        try:
            definition.create(using=self._writer())
        except BadRequestError as exc:
            if exc.error != "resource_already_exists_exception":
                raise
        return True

    def _delete(self, alias: str, doc_ids: Sequence[int], *, refresh: bool) -> None:
        """Deletes the documents' chunks by id: a scroll finds them, one bulk request deletes them.
        ``_delete_by_query`` would be one call, but it lives in the ``reindex`` module, which a minimal
        node (the tests' ``integ-test-zip``) lacks; this needs only the server itself."""
        writer = self._writer()
        query = {"query": Terms(doc_id=list(doc_ids)).to_dict()}
        ids = [hit["_id"] for hit in scan(writer, index=alias, query=query, _source=False)]
        # A chunk another writer deleted meanwhile is gone either way: a 404 is no failure.
        actions = ({"_op_type": "delete", "_index": alias, "_id": chunk_id} for chunk_id in ids)
        _, failures = bulk(writer, actions, chunk_size=BULK_CHUNK_DOCS, raise_on_error=False, refresh=refresh)
        failed = [item for item in failures if next(iter(item.values())).get("status") != 404]  # type: ignore[union-attr]
        if failed:
            raise LexicalIndexError("server_error", f"Elasticsearch left chunks undeleted: {failed[:3]}")

    def _indices_behind(self, alias: str) -> list[str]:
        try:
            return list(self.client.indices.get_alias(name=alias))
        except NotFoundError:
            return []

    def _bulk_index(self, index: str, chunks: Iterable[LexicalDocument], *, with_filters: bool) -> int:
        """Indexes ``chunks`` with ``_id`` = chunk id, so a retried batch overwrites instead of duplicating;
        their business fields only into a generation whose mapping has them (it is ``strict``)."""
        actions = (
            {"_index": index, "_id": str(chunk.chunk_id), "_source": _source(chunk, with_filters)} for chunk in chunks
        )
        count, _ = bulk(self._writer(), actions, chunk_size=BULK_CHUNK_DOCS, max_retries=3, initial_backoff=1)
        return count


@contextlib.contextmanager
def _translated_errors(action: str) -> Iterator[None]:
    """Turns client failures into ``LexicalIndexError`` so the search degrades instead of failing."""
    try:
        yield
    except ConnectionTimeout as exc:
        raise LexicalIndexError("timeout", f"Elasticsearch timed out ({action}): {exc}") from exc
    except TransportError as exc:  # connection refused or reset, TLS, DNS
        raise LexicalIndexError("connection_error", f"cannot reach Elasticsearch ({action}): {exc}") from exc
    except ApiError as exc:
        raise LexicalIndexError(_cause_of_status(exc.meta.status), f"Elasticsearch failed to {action}: {exc}") from exc
    except BulkIndexError as exc:
        statuses = [item.get("status", 500) for result in exc.errors for item in result.values()]
        raise LexicalIndexError(
            _cause_of_status(max(statuses, default=500)),
            f"Elasticsearch rejected documents ({action}): {exc.errors[:3]}",
        ) from exc


def _cause_of_status(status: int) -> str:
    """5xx and 429 (overloaded) are the server's fault; other 4xx mean a bad request or bad credentials."""
    return "server_error" if status >= 500 or status == 429 else "request_error"
