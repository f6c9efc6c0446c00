"""Embedded BM25 with tantivy: one on-disk index per KB version under ``LEXICAL_INDEX_DIR``.

Text arrives analyzed (see ``engines.analysis``) and is split on whitespace only, so tantivy and
Elasticsearch index the same tokens. Scoring is tantivy's BM25 (k1 = 1.2, b = 0.75, Lucene's idf).
Tenant, allowed-chunk and business-field filters sit in zero-weight const-score clauses so they never
move scores. The business fields (``engines.lexical_filter``) are ``raw`` terms in the multi-valued
``filters`` field and the creation time in the ``created_at`` fast field; a generation records in its
state file whether its entries carry them (generations built before they existed do not, until rebuilt).

Layout: ``kbv-<version>/CURRENT`` names the live generation folder; a rebuild fills a new
generation and switches ``CURRENT`` atomically, so searches never see a half-built index and a
failed rebuild leaves the old one serving; the next rebuild removes what a killed one left. Only one
writer may hold an index at a time (also across processes): writes retry on ``LockBusy``; rebuilds of
one version must not run concurrently (``knowledge.lexical`` serializes them with a database lock).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Literal, cast

import tantivy

from engines import lexical_filter as lf
from engines.base import (
    BM25_K1,
    IndexState,
    LexicalDocument,
    LexicalHit,
    LexicalIndex,
    LexicalIndexError,
    bm25_ceiling,
)

POINTER_FILE = "CURRENT"
STATE_FILE = "analyzer.json"
WRITER_HEAP_BYTES = 64_000_000
# Up to how many chunk ids a search inside them asks one term query each rather than a term set: below
# about this many, term queries are the faster of the two.
TERM_QUERIES_UP_TO = 100


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("chunk_id", stored=True, indexed=True, fast=True)
    builder.add_unsigned_field("doc_id", indexed=True, fast=True)
    builder.add_unsigned_field("tenant_id", indexed=True, fast=True)
    builder.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
    # Added after the first four, so their field numbers, and queries on generations without these, stay.
    builder.add_text_field("filters", tokenizer_name="raw", index_option="basic")
    builder.add_integer_field("created_at", indexed=True, fast=True)
    return builder.build()


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    temporary.write_text(text)
    os.replace(temporary, path)


class TantivyLexicalIndex(LexicalIndex):
    name = "tantivy"

    def __init__(self, root: Path, *, lock_timeout_s: float = 30.0):
        self.root = Path(root)
        self.schema = _schema()
        self.lock_timeout_s = lock_timeout_s
        self._indexes: dict[Path, tantivy.Index] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

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
        with self._version_lock(version_id):
            generation = self._generation(version_id) or self._new_generation(version_id)
            with_filters = not (generation / STATE_FILE).exists() or self._has_filters(generation)
            with self._writer(generation) as writer:
                self._delete(writer, replacing)
                for chunk in entries:
                    writer.add_document(self._document(chunk, with_filters))
            # The state records what built the index: incremental writes keep it, so an index
            # built by an older analyzer stays visibly stale until it is rebuilt.
            if not (generation / STATE_FILE).exists():
                self._write_state(generation, analyzer_version, dictionary_fingerprint)
            self._publish(version_id, generation)

    def delete(self, version_id: int, doc_ids: Sequence[int]) -> None:
        with self._version_lock(version_id):
            generation = self._generation(version_id)
            if generation is None or not doc_ids:
                return
            with self._writer(generation) as writer:
                self._delete(writer, doc_ids)
            self._publish(version_id, generation)

    def build_version(
        self, version_id: int, entries: Iterable[LexicalDocument], *, analyzer_version: str, dictionary_fingerprint: str
    ) -> int:
        with self._version_lock(version_id):
            generation = self._new_generation(version_id)
            count = 0
            try:
                with self._writer(generation) as writer:
                    for chunk in entries:
                        writer.add_document(self._document(chunk, True))
                        count += 1
                self._write_state(generation, analyzer_version, dictionary_fingerprint)
            except BaseException:
                self._forget(generation)
                raise
            self._publish(version_id, generation)
            for stale in self._version_dir(version_id).glob("gen-*"):  # the previous one, and any a killed
                if stale != generation:  # rebuild left behind (callers never rebuild a version concurrently)
                    self._forget(stale)
            return count

    def switch_version(self, previous_id: int | None, version_id: int) -> None:
        """No-op: each version has its own index, and a search names its version."""

    def drop_version(self, version_id: int) -> None:
        with self._version_lock(version_id):
            for generation in self._version_dir(version_id).glob("gen-*"):
                self._forget(generation)
            shutil.rmtree(self._version_dir(version_id), ignore_errors=True)

    # --- reads ----------------------------------------------------------------------------------

    def ping(self) -> str:
        """Ready when the index root (or, before the first write, its nearest existing parent) is a
        writable folder: every ingest writes there."""
        existing = next(path for path in (self.root, *self.root.parents) if path.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            message = f"the keyword index folder {self.root} cannot be written ({existing})"
            raise LexicalIndexError("not_writable", message)
        return "tantivy: the index folder is writable"

    def state(self, version_id: int) -> IndexState | None:
        with _reading(version_id):
            generation = self._generation(version_id)
            if generation is None:
                return None
            try:
                meta = json.loads((generation / STATE_FILE).read_text())
            except (FileNotFoundError, ValueError):
                return None
            searcher = self._searcher(generation)
            level = int(meta.get("filters") or 0)
            return IndexState(
                meta["analyzer_version"], meta["dictionary_fingerprint"], searcher.num_docs, level >= 1, level >= 2
            )

    def chunk_ids(self, version_id: int) -> list[int]:
        with _reading(version_id):
            generation = self._generation(version_id)
            if generation is None:
                return []
            searcher = self._searcher(generation)
            if searcher.num_docs == 0:
                return []
            result = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False)
            return cast(list[int], searcher.fast_field_values("chunk_id", [address for _, address in result.hits]))

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
        with _reading(version_id):
            return self._search(version_id, tenant_id, tokens, limit, allowed_chunk_ids, weights, field_filter)

    def max_score(self, version_id: int, tokens: list[str], weights: list[float] | None = None) -> float:
        with _reading(version_id):
            generation = self._generation(version_id)
            if generation is None or not tokens:
                return 0.0
            searcher = self._searcher(generation)
            frequencies = [searcher.doc_freq("body", token) for token in tokens]
            return bm25_ceiling(searcher.num_docs, frequencies, scale=BM25_K1 + 1, weights=weights)

    # --- internals ------------------------------------------------------------------------------

    def _search(
        self,
        version_id: int,
        tenant_id: int,
        tokens: list[str],
        limit: int,
        allowed_chunk_ids: list[int] | None,
        weights: list[float] | None,
        field_filter: lf.LexicalFilter | None,
    ) -> list[LexicalHit]:
        generation = self._generation(version_id)
        if not tokens or limit <= 0 or allowed_chunk_ids == [] or generation is None:
            return []
        term = tantivy.Query.term_query
        clauses = [term(self.schema, "body", token) for token in tokens]
        if weights is not None:
            clauses = [
                tantivy.Query.boost_query(clause, weight) for clause, weight in zip(clauses, weights, strict=True)
            ]
        text_query = tantivy.Query.boolean_query([(tantivy.Occur.Should, clause) for clause in clauses])
        required = [
            (tantivy.Occur.Must, text_query),
            (tantivy.Occur.Must, tantivy.Query.const_score_query(term(self.schema, "tenant_id", tenant_id), 0.0)),
        ]
        if allowed_chunk_ids is not None:
            required.append((tantivy.Occur.Must, tantivy.Query.const_score_query(self._ids(allowed_chunk_ids), 0.0)))
        if field_filter is not None:
            if not self._has_filters(generation):
                raise LexicalIndexError(
                    "no_filter_fields", f"the keyword index of KB version {version_id} holds no filter fields"
                )
            required.append((tantivy.Occur.Must, tantivy.Query.const_score_query(self._filter(field_filter), 0.0)))
        searcher = self._searcher(generation)
        result = searcher.search(tantivy.Query.boolean_query(required), limit, count=False)
        # The chunk ids from their fast field in one call, not each hit's stored document.
        chunk_ids = cast(list[int], searcher.fast_field_values("chunk_id", [address for _, address in result.hits]))
        return [
            LexicalHit(chunk_id=chunk_id, score=score)
            for (score, _), chunk_id in zip(result.hits, chunk_ids, strict=True)
        ]

    def _ids(self, chunk_ids: list[int]) -> tantivy.Query:
        """The chunks of ``chunk_ids``: a few as one term query each (``TERM_QUERIES_UP_TO``), many as a term set."""
        if len(chunk_ids) > TERM_QUERIES_UP_TO:
            return tantivy.Query.term_set_query(self.schema, "chunk_id", chunk_ids)
        terms = [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "chunk_id", c)) for c in chunk_ids]
        return tantivy.Query.boolean_query(terms)

    def _filter(self, node: lf.LexicalFilter) -> tantivy.Query:
        """A business-field filter as a tantivy query (it matches or not; the caller makes it score 0)."""
        occur = tantivy.Occur
        match node:
            case lf.Terms(values) | lf.DocIds(values):
                field = "filters" if isinstance(node, lf.Terms) else "doc_id"
                if not values:
                    return tantivy.Query.empty_query()
                return tantivy.Query.term_set_query(self.schema, field, list(values))
            case lf.CreatedRange(lower, upper, include_lower, include_upper):
                return tantivy.Query.range_query(
                    self.schema, "created_at", tantivy.FieldType.Integer, lower, upper,
                    include_lower or lower is None, include_upper or upper is None,
                )  # fmt: skip
            case lf.And(parts):
                return tantivy.Query.boolean_query([(occur.Must, self._filter(part)) for part in parts])
            case lf.Or(parts):
                return tantivy.Query.boolean_query([(occur.Should, self._filter(part)) for part in parts])
            case lf.Not(part):
                return tantivy.Query.boolean_query(
                    [(occur.Must, tantivy.Query.all_query()), (occur.MustNot, self._filter(part))]
                )
        raise TypeError(f"not a lexical filter: {node!r}")

    def _has_filters(self, generation: Path) -> bool:
        try:
            return bool(json.loads((generation / STATE_FILE).read_text()).get("filters"))
        except (FileNotFoundError, ValueError):
            return False

    def _version_dir(self, version_id: int) -> Path:
        return self.root / f"kbv-{int(version_id)}"

    def _generation(self, version_id: int) -> Path | None:
        """The live generation folder, read fresh each time so other processes' switches are seen."""
        try:
            name = (self._version_dir(version_id) / POINTER_FILE).read_text().strip()
        except FileNotFoundError:
            return None
        generation = self._version_dir(version_id) / name
        return generation if generation.is_dir() else None

    def _new_generation(self, version_id: int) -> Path:
        generation = self._version_dir(version_id) / f"gen-{time.time_ns()}"
        generation.mkdir(parents=True)
        tantivy.Index(self.schema, path=str(generation))
        return generation

    def _publish(self, version_id: int, generation: Path) -> None:
        _write_atomically(self._version_dir(version_id) / POINTER_FILE, generation.name)

    def _forget(self, generation: Path) -> None:
        with self._guard:
            self._indexes.pop(generation, None)
        shutil.rmtree(generation, ignore_errors=True)

    def _write_state(self, generation: Path, analyzer_version: str, dictionary_fingerprint: str) -> None:
        state = {
            "analyzer_version": analyzer_version,
            "dictionary_fingerprint": dictionary_fingerprint,
            "filters": lf.FILTER_FIELDS_LEVEL,
        }
        _write_atomically(generation / STATE_FILE, json.dumps(state))

    def _index(self, generation: Path) -> tantivy.Index:
        with self._guard:
            index = self._indexes.get(generation)
            if index is None:
                index = self._indexes[generation] = tantivy.Index.open(str(generation))
            return index

    def _searcher(self, generation: Path) -> tantivy.Searcher:
        index = self._index(generation)
        index.reload()  # see commits of other processes (cheap)
        return index.searcher()

    def _version_lock(self, version_id: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(version_id, threading.Lock())

    def _document(self, chunk: LexicalDocument, with_filters: bool) -> tantivy.Document:
        document = tantivy.Document()
        document.add_unsigned("chunk_id", chunk.chunk_id)
        document.add_unsigned("doc_id", chunk.doc_id)
        document.add_unsigned("tenant_id", chunk.tenant_id)
        document.add_text("body", chunk.text)
        if with_filters and chunk.fields is not None:
            for term in chunk.fields.terms:
                document.add_text("filters", term)
            document.add_integer("created_at", chunk.fields.created_at_us)
        return document

    def _delete(self, writer: tantivy.IndexWriter, doc_ids: Sequence[int]) -> None:
        for doc_id in doc_ids:
            writer.delete_documents_by_query(tantivy.Query.term_query(self.schema, "doc_id", doc_id))

    def _writer(self, generation: Path) -> _Writer:
        return _Writer(self._index(generation), self.lock_timeout_s)


@contextmanager
def _reading(version_id: int) -> Iterator[None]:
    """tantivy reports a corrupt or unreadable index (``meta.json``, a segment file) as ``ValueError``;
    the file system as ``OSError``: both mean this version's index cannot serve."""
    try:
        yield
    except (ValueError, OSError) as exc:
        message = f"the keyword index of KB version {version_id} cannot be read: {exc}"
        raise LexicalIndexError("unreadable_index", message) from exc


class _Writer:
    """The one code path that writes: retries the cross-process ``LockBusy`` with backoff, commits
    on success and rolls back on any error, always releasing the lock."""

    def __init__(self, index: tantivy.Index, lock_timeout_s: float):
        self.index, self.lock_timeout_s = index, lock_timeout_s

    def __enter__(self) -> tantivy.IndexWriter:
        deadline, delay = time.monotonic() + self.lock_timeout_s, 0.01
        while True:
            try:
                self.writer = self.index.writer(heap_size=WRITER_HEAP_BYTES, num_threads=1)
                return self.writer
            except ValueError as exc:
                if "LockBusy" not in str(exc):
                    raise LexicalIndexError("index_error", f"cannot open the lexical index for writing: {exc}") from exc
                if time.monotonic() > deadline:
                    raise LexicalIndexError(
                        "index_locked", f"lexical index is locked by another writer: {exc}"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        try:
            if exc_type is None:
                try:
                    self.writer.commit()
                except BaseException:
                    self.writer.rollback()
                    raise
            else:
                self.writer.rollback()
        finally:
            self.writer.wait_merging_threads()
        return False
