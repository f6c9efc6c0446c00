"""Contract of the lexical (BM25) engines, run against every backend: tantivy always, Elasticsearch
where ``ELASTICSEARCH_URL`` points at a server. Texts and queries are already analyzed (space-separated
tokens), so no analyzer is involved. The Elasticsearch adapter's requests are also checked against a
recording fake server, which runs everywhere."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tantivy

from engines import tantivy_index
from engines.base import LexicalDocument, LexicalHit, LexicalIndex, LexicalIndexError
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from engines.tantivy_index import TERM_QUERIES_UP_TO, TantivyLexicalIndex
from tests.concurrency import recorded_sleeps, wait_until
from tests.conftest import corrupt_keyword_index
from tests.peers import Peer, PeerRequest, Reply

K1, B = 1.2, 0.75
VERSION = 1
TENANT, OTHER_TENANT = 7, 8
STATE = {"analyzer_version": "a1", "dictionary_fingerprint": "f1"}


# --- backends -----------------------------------------------------------------------------------


@dataclass
class Backend:
    name: str
    open: Callable[[], LexicalIndex]  # another instance on the same store, as another process opens it
    scale: float  # BM25's constant factor (k1 + 1): tantivy keeps it, Lucene dropped it in 8.0


@pytest.fixture(params=["tantivy", "elasticsearch"])
def backend(request, tmp_path) -> Iterator[Backend]:
    if request.param == "tantivy":
        yield Backend("tantivy", lambda: TantivyLexicalIndex(tmp_path / "lexical"), scale=K1 + 1)
        return
    url = os.environ.get("ELASTICSEARCH_URL")
    if not url:
        pytest.skip("ELASTICSEARCH_URL is not set: no Elasticsearch server on this machine")
    prefix = f"test-lexical-{uuid.uuid4().hex[:12]}"
    yield Backend("elasticsearch", lambda: ElasticsearchLexicalIndex(url, prefix=prefix), scale=1.0)
    client = ElasticsearchLexicalIndex(url, prefix=prefix).client
    names = list(client.indices.get_alias(index=f"{prefix}-*", expand_wildcards="all"))
    if names:
        client.options(ignore_status=404).indices.delete(index=",".join(names))


@pytest.fixture
def index(backend) -> LexicalIndex:
    return backend.open()


def doc(chunk_id: int, text: str, *, doc_id: int | None = None, tenant_id: int = TENANT) -> LexicalDocument:
    return LexicalDocument(
        chunk_id=chunk_id, doc_id=chunk_id if doc_id is None else doc_id, tenant_id=tenant_id, text=text
    )


def write(index: LexicalIndex, chunks: list[LexicalDocument], *, version: int = VERSION, **state: str) -> None:
    """Replaces the documents of ``chunks`` (ingestion's unit of work)."""
    index.replace_documents(version, sorted({c.doc_id for c in chunks}), chunks, **(STATE | state))


def search(
    index: LexicalIndex,
    query: str,
    *,
    tenant_id: int = TENANT,
    allowed: list[int] | None = None,
    version: int = VERSION,
) -> list[LexicalHit]:
    return index.search(version, tenant_id, query.split(), 10, allowed)


def ids(hits: list[LexicalHit]) -> list[int]:
    return [hit.chunk_id for hit in hits]


def lucene_bm25(corpus: list[LexicalDocument], query: list[str], scale: float) -> dict[int, float]:
    """Expected scores, from the formula: idf = ln(1 + (N - n + 0.5) / (n + 0.5)),
    tf = f / (f + k1 (1 - b + b dl / avgdl)), summed over the query tokens (repeats included),
    statistics over the whole index (every tenant)."""
    bodies = {d.chunk_id: d.text.split() for d in corpus}
    n_docs = len(bodies)
    avgdl = sum(len(tokens) for tokens in bodies.values()) / n_docs
    scores: dict[int, float] = {}
    for token in query:
        df = sum(token in tokens for tokens in bodies.values())
        idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        for chunk_id, tokens in bodies.items():
            f = tokens.count(token)
            if f:
                tf = f / (f + K1 * (1 - B + B * len(tokens) / avgdl))
                scores[chunk_id] = scores.get(chunk_id, 0.0) + scale * idf * tf
    return scores


def assert_scores(hits: list[LexicalHit], expected: dict[int, float]) -> None:
    assert ids(hits) == sorted(expected, key=lambda chunk_id: -expected[chunk_id])
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.chunk_id], rel=1e-4)


# Short documents (<= 40 tokens): both engines store these lengths exactly, so the formula is exact.
CORPUS = [
    doc(1, "apple banana apple cherry"),
    doc(2, "banana cherry date elderberry fig grape"),
    doc(3, "apple apple apple banana"),
    doc(4, "cherry date"),
    doc(5, "kiwi lemon mango apple banana cherry date elderberry fig grape honeydew"),
    doc(6, "lime"),
]
OTHER_TENANT_DOCS = [
    doc(20, "secret plans apple", tenant_id=OTHER_TENANT),
    doc(21, "secret cherry cherry cherry", tenant_id=OTHER_TENANT),
]


# --- scoring ------------------------------------------------------------------------------------


def test_bm25_matches_the_lucene_formula(index, backend):
    write(index, CORPUS)
    query = ["apple", "cherry"]
    assert_scores(index.search(VERSION, TENANT, query, 10, None), lucene_bm25(CORPUS, query, backend.scale))


def test_tenant_filter_adds_nothing_to_scores_and_hides_other_tenants(index, backend):
    corpus = CORPUS + OTHER_TENANT_DOCS
    write(index, corpus)
    query = ["apple", "cherry"]
    expected = {k: v for k, v in lucene_bm25(corpus, query, backend.scale).items() if k < 20}
    assert_scores(index.search(VERSION, TENANT, query, 10, None), expected)
    assert search(index, "secret plans") == []
    assert ids(search(index, "secret plans", tenant_id=OTHER_TENANT)) == [20, 21]


def test_allowed_chunk_ids_restrict_results_without_changing_scores(index):
    write(index, CORPUS)
    unfiltered = {hit.chunk_id: hit.score for hit in search(index, "apple cherry")}
    hits = search(index, "apple cherry", allowed=[2, 4, 6])
    assert ids(hits) == [4, 2]
    assert all(hit.score == pytest.approx(unfiltered[hit.chunk_id], rel=1e-6) for hit in hits)
    assert search(index, "apple cherry", allowed=[]) == []


def test_a_search_inside_many_chunk_ids_finds_what_one_inside_few_finds(index):
    """Few ids and many ids are asked differently of tantivy (a term query each, or a term set): same hits."""
    write(index, CORPUS)
    few = search(index, "apple cherry", allowed=[2, 4, 6])
    many = search(index, "apple cherry", allowed=[2, 4, 6, *range(1000, 1000 + TERM_QUERIES_UP_TO)])
    assert [(hit.chunk_id, hit.score) for hit in many] == [(hit.chunk_id, hit.score) for hit in few]


def test_a_repeated_query_token_counts_twice(index):
    write(index, CORPUS)
    once = {hit.chunk_id: hit.score for hit in search(index, "apple")}
    twice = {hit.chunk_id: hit.score for hit in search(index, "apple apple")}
    assert once.keys() == twice.keys() == {1, 3, 5}
    assert all(twice[k] == pytest.approx(2 * once[k], rel=1e-5) for k in once)


def test_non_ascii_and_product_code_tokens_match_exactly_and_whole(index):
    write(index, [doc(1, "鱼香肉丝 很 好吃"), doc(2, "型号 sky-10023908 说明书"), doc(3, "鱼香 茄子")])
    assert ids(search(index, "鱼香肉丝")) == [1]
    assert ids(search(index, "鱼香")) == [3]
    assert ids(search(index, "sky-10023908")) == [2]
    assert search(index, "sky") == search(index, "10023908") == []


def test_no_tokens_or_no_room_returns_nothing(index, backend, request):
    write(index, CORPUS)
    assert index.search(VERSION, TENANT, [], 10, None) == []
    assert index.search(VERSION, TENANT, ["apple"], 0, None) == []


# --- writes -------------------------------------------------------------------------------------


def test_replace_documents_swaps_a_documents_chunks(index):
    write(index, [doc(1, "old words", doc_id=10), doc(2, "old text", doc_id=10), doc(3, "old kept", doc_id=11)])
    write(index, [doc(4, "new words", doc_id=10)])
    assert ids(search(index, "old")) == [3]
    assert ids(search(index, "new")) == [4]
    assert index.state(VERSION).num_docs == 2


def test_rebuild_replaces_everything(index):
    write(index, [doc(1, "before"), doc(2, "before too")])
    assert index.rebuild(VERSION, iter([doc(3, "after"), doc(4, "after all")]), **STATE) == 2
    assert search(index, "before") == []
    assert ids(search(index, "all")) == [4]
    assert index.state(VERSION).num_docs == 2


def test_drop_removes_the_index_and_missing_indexes_search_empty(index):
    assert search(index, "anything", version=VERSION + 5) == []
    write(index, [doc(1, "gone soon")])
    index.drop(VERSION)
    assert search(index, "gone") == []
    assert index.state(VERSION) is None
    index.drop(VERSION)  # absent: no-op


def test_state_records_what_built_the_index(index):
    assert index.state(VERSION) is None
    write(index, [doc(1, "one"), doc(2, "two")], analyzer_version="a1", dictionary_fingerprint="f1")
    state = index.state(VERSION)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a1", "f1", 2)

    write(index, [doc(3, "three")], analyzer_version="a2", dictionary_fingerprint="f2")
    state = index.state(VERSION)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a1", "f1", 3)  # stays stale

    index.rebuild(VERSION, [doc(3, "three")], analyzer_version="a2", dictionary_fingerprint="f2")
    state = index.state(VERSION)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a2", "f2", 1)


def test_a_failed_rebuild_keeps_the_old_index(index, backend, request):
    write(index, [doc(1, "precious")])

    def failing_chunks():
        yield doc(2, "replacement")
        raise RuntimeError("the analyzer crashed")

    with pytest.raises(RuntimeError):
        index.rebuild(VERSION, failing_chunks(), analyzer_version="a2", dictionary_fingerprint="f2")
    assert ids(search(index, "precious")) == [1]
    assert index.state(VERSION).analyzer_version == "a1"


def test_readers_see_the_old_index_until_a_rebuild_completes(index, backend, request):
    write(index, [doc(1, "precious")])
    reader = backend.open()
    seen_during_rebuild = []

    def chunks():
        yield doc(2, "replacement")
        seen_during_rebuild.append(ids(search(reader, "precious")))

    index.rebuild(VERSION, chunks(), **STATE)
    assert seen_during_rebuild == [[1]]
    assert ids(search(reader, "replacement")) == [2]


# --- several writers and readers ----------------------------------------------------------------


def test_concurrent_writers_to_one_version_both_succeed(index):
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(first_chunk: int) -> None:
        try:
            barrier.wait()
            for n in range(first_chunk, first_chunk + 5):
                write(index, [doc(n, f"shared token{n}")])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(start,)) for start in (1, 101)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert index.state(VERSION).num_docs == 10
    assert ids(search(index, "token104")) == [104]


def test_another_instance_sees_commits(index, backend):
    reader = backend.open()
    assert search(reader, "fresh") == []  # opens the (absent) index before the write
    write(index, [doc(1, "fresh words")])
    assert ids(search(reader, "fresh")) == [1]
    assert reader.state(VERSION).num_docs == 1
    index.rebuild(VERSION, [doc(2, "rebuilt words")], **STATE)
    assert ids(search(reader, "words")) == [2]


def test_another_instance_can_write_after_a_drop(index, backend, request):
    other = backend.open()
    write(other, [doc(1, "first")])
    index.drop(VERSION)
    write(other, [doc(2, "second")])
    assert ids(search(index, "second")) == [2]


# --- tantivy: the cross-process writer lock -------------------------------------------------------


def _version_dir(root: Path) -> str:
    """The live index folder of the only version (the generation its CURRENT pointer names)."""
    (folder,) = root.iterdir()
    return str(folder / (folder / "CURRENT").read_text().strip())


@pytest.mark.parametrize("damaged", ["meta.json", "*.idx", "*.term"])
def test_tantivy_reads_of_a_corrupt_index_raise_lexical_index_errors(tmp_path, damaged):
    index = TantivyLexicalIndex(tmp_path)
    write(index, [doc(1, "before"), doc(2, "after")])
    corrupt_keyword_index(tmp_path, VERSION, (damaged,))
    for read in (lambda: index.state(VERSION), lambda: search(index, "before")):
        with pytest.raises(LexicalIndexError) as caught:
            read()
        assert caught.value.cause == "unreadable_index" and f"KB version {VERSION}" in caught.value.message


def test_tantivy_write_waits_for_another_process_writer(tmp_path, monkeypatch):
    index = TantivyLexicalIndex(tmp_path)
    write(index, [doc(1, "before")])
    foreign = tantivy.Index.open(_version_dir(tmp_path)).writer()
    backoffs = recorded_sleeps(monkeypatch, tantivy_index)  # the writer's waits after LockBusy
    done = threading.Event()
    thread = threading.Thread(target=lambda: (write(index, [doc(2, "after")]), done.set()))
    thread.start()
    wait_until(lambda: len(backoffs) >= 2, message="the writer to retry LockBusy twice")
    assert not done.is_set()
    foreign.wait_merging_threads()  # releases the lock
    thread.join(timeout=10)
    assert done.is_set()
    assert ids(search(index, "after")) == [2]


def test_tantivy_write_gives_up_when_the_lock_stays_held(tmp_path):
    index = TantivyLexicalIndex(tmp_path, lock_timeout_s=0.2)
    write(index, [doc(1, "before")])
    foreign = tantivy.Index.open(_version_dir(tmp_path)).writer()
    try:
        with pytest.raises(LexicalIndexError) as caught:
            write(index, [doc(2, "after")])
        assert caught.value.cause == "index_locked"
    finally:
        foreign.wait_merging_threads()
    assert ids(search(index, "before")) == [1]


# --- Elasticsearch adapter: the requests it sends, against a recording fake -----------------------


def ndjson(request: PeerRequest) -> list[dict]:
    return [json.loads(line) for line in request.body.splitlines() if line]


class FakeElasticsearch(Peer):
    """Just enough Elasticsearch to see what the adapter sends: answers from a route table (first
    match of method and path regexes; a body may be a function of the request)."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, str, int, object]] = []
        super().__init__(self.answer)

    def route(self, method: str, path: str, status: int = 200, body: object = None) -> None:
        self.routes.append((method, path, status, {"acknowledged": True} if body is None else body))

    def answer(self, request: PeerRequest) -> Reply:
        product = {"X-Elastic-Product": "Elasticsearch"}  # the client refuses servers without it
        for method, path, status, body in self.routes:
            if re.fullmatch(method, request.method) and re.fullmatch(path, request.path):
                return Reply(status, body(request) if callable(body) else body, product)
        unrouted = {"error": {"type": "fake_has_no_route", "reason": f"{request.method} {request.path}"}}
        return Reply(400, unrouted, product)

    def calls(self) -> list[str]:
        return [f"{r.method} {r.path}" for r in self.requests]


@pytest.fixture
def fake() -> Iterator[FakeElasticsearch]:
    with FakeElasticsearch() as fake:
        yield fake


def es_index(url: str, **options) -> ElasticsearchLexicalIndex:
    return ElasticsearchLexicalIndex(url, prefix="Unit", request_timeout_s=2.0, max_retries=0, **options)


def bulk_ok(request: PeerRequest) -> dict:
    actions = ndjson(request)[::2]
    return {"took": 1, "errors": False, "items": [{"index": {**a["index"], "status": 201}} for a in actions]}


NOT_FOUND = {"error": {"type": "index_not_found_exception", "reason": "no such index"}, "status": 404}


def test_es_client_is_created_lazily(fake):
    index = es_index(fake.url)
    assert index._client is None
    assert fake.requests == []


def test_es_search_request(fake):
    fake.route(
        "POST",
        "/unit-kbv-3/_search",
        body={"hits": {"hits": [{"_id": "42", "_score": 2.5}, {"_id": "7", "_score": 1.0}]}},
    )
    hits = es_index(fake.url).search(3, TENANT, ["鱼香肉丝", "a", "a"], 25, [42, 7])
    assert hits == [LexicalHit(42, 2.5), LexicalHit(7, 1.0)]
    (request,) = fake.requests
    assert request.json() == {
        "query": {
            "bool": {
                "should": [{"term": {"body": "鱼香肉丝"}}, {"term": {"body": "a"}}, {"term": {"body": "a"}}],
                "minimum_should_match": 1,
                "filter": [{"term": {"tenant_id": TENANT}}, {"terms": {"chunk_id": [42, 7]}}],
            }
        },
        "size": 25,
        "track_total_hits": False,
        "_source": False,
    }


def test_es_score_ceiling_reads_document_frequencies_from_term_vectors(fake):
    vectors = {"field_statistics": {"doc_count": 10}, "terms": {"a": {"doc_freq": 2, "term_freq": 2}}}
    fake.route("(GET|POST)", "/unit-kbv-3/_termvectors", body={"found": True, "term_vectors": {"body": vectors}})
    ceiling = es_index(fake.url).max_score(3, ["a", "b", "a"])
    # Lucene's idf (no k1 + 1 factor), "b" in no document counts as the rarest, "a" twice as searched
    idf_a, idf_b = math.log(1 + (10 - 2 + 0.5) / 2.5), math.log(1 + (10 + 0.5) / 0.5)
    assert ceiling == pytest.approx(2 * idf_a + idf_b)
    (request,) = fake.requests
    assert request.path == "/unit-kbv-3/_termvectors" and request.json()["doc"] == {"body": "a b a"}
    fake.route("(GET|POST)", "/unit-kbv-4/_termvectors", 404, NOT_FOUND)
    assert es_index(fake.url).max_score(4, ["a"]) == 0.0


def test_es_search_without_candidates_sends_nothing(fake):
    index = es_index(fake.url)
    assert index.search(3, TENANT, ["a"], 10, []) == []
    assert index.search(3, TENANT, [], 10, None) == []
    assert index.search(3, TENANT, ["a"], 0, None) == []
    assert fake.requests == []


def test_es_search_on_a_missing_index_is_empty(fake):
    fake.route("POST", "/unit-kbv-3/_search", 404, NOT_FOUND)
    assert es_index(fake.url).search(3, TENANT, ["a"], 10, None) == []


@pytest.mark.parametrize(
    ("status", "cause"), [(503, "server_error"), (500, "server_error"), (429, "server_error"), (401, "request_error")]
)
def test_es_http_errors_become_lexical_index_errors(fake, status, cause):
    fake.route(".*", ".*", status, {"error": {"type": "some_exception", "reason": "no"}, "status": status})
    with pytest.raises(LexicalIndexError) as caught:
        es_index(fake.url).search(3, TENANT, ["a"], 10, None)
    assert caught.value.cause == cause


def test_es_unreachable_server_is_a_connection_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(LexicalIndexError) as caught:
        es_index(f"http://127.0.0.1:{port}").state(3)
    assert caught.value.cause == "connection_error"


def held(fake: FakeElasticsearch, **reply_changes) -> None:
    """Every answer of ``fake`` held back or dripped as ``reply_changes`` say (``Reply``'s fields)."""
    answer = fake.respond
    fake.respond = lambda request: dataclasses.replace(answer(request), **reply_changes)


def test_es_silent_server_is_a_timeout_and_not_retried(fake):
    fake.route("POST", ".*/_search", body={"hits": {"hits": []}})
    held(fake, delay_s=60)  # answers after the test
    index = ElasticsearchLexicalIndex(fake.url, request_timeout_s=0.3)  # the client's own retries on
    with pytest.raises(LexicalIndexError) as caught:
        index.search(3, TENANT, ["a"], 10, None)
    assert caught.value.cause == "timeout"
    [request] = fake.requests
    wait_until(lambda: request.outcome == "hung_up", message="the client to close the connection it gave up on")


def test_es_search_dripping_its_answer_is_cut_off_at_the_deadline(fake):
    """Each byte arrives well within the 2 s read timeout; the whole search may take 0.5 s, the whole
    answer would take half a minute: it is still being sent when the search gives up."""
    fake.route("POST", "/unit-kbv-3/_search", body={"hits": {"hits": []}})
    held(fake, drip_s=0.2)
    with pytest.raises(LexicalIndexError) as caught:
        es_index(fake.url, search_deadline_s=0.5).search(3, TENANT, ["a"], 10, None)
    assert caught.value.cause == "deadline"
    assert [request.outcome for request in fake.requests] == ["pending"]


def test_es_first_write_creates_generation_zero_behind_the_alias(fake):
    fake.route("HEAD", "/_alias/unit-kbv-3", 404, {})
    fake.route("PUT", "/unit-kbv-3-0")
    fake.route("POST", "/unit-kbv-3/_delete_by_query", body={"deleted": 0, "failures": []})
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    es_index(fake.url).replace_documents(3, [10], [doc(42, "a b", doc_id=10)], **STATE)

    assert fake.calls() == [
        "HEAD /_alias/unit-kbv-3",
        "PUT /unit-kbv-3-0",
        "POST /unit-kbv-3/_delete_by_query",
        "PUT /_bulk",
        "POST /unit-kbv-3/_refresh",
    ]
    create, delete, load = fake.requests[1], fake.requests[2], fake.requests[3]
    assert create.json()["aliases"] == {"unit-kbv-3": {}}
    assert create.json()["mappings"]["_meta"] == {**STATE, "filters": "1"}
    assert delete.json() == {"query": {"terms": {"doc_id": [10]}}}
    assert delete.params["conflicts"] == ["proceed"]
    assert ndjson(load) == [
        {"index": {"_index": "unit-kbv-3", "_id": "42"}},
        {"chunk_id": 42, "doc_id": 10, "tenant_id": TENANT, "body": "a b"},
    ]


def test_es_index_definition(fake):
    fake.route("HEAD", "/_alias/unit-kbv-3", 404, {})
    fake.route("PUT", "/unit-kbv-3-0")
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    es_index(fake.url).replace_documents(3, [], [doc(1, "x")], **STATE)

    definition = fake.requests[1].json()
    assert definition["settings"] == {
        "number_of_shards": 1,
        "refresh_interval": "-1",
        "similarity": {"retrieval_bm25": {"type": "BM25", "k1": 1.2, "b": 0.75}},
        "analysis": {"analyzer": {"pre_analyzed": {"type": "custom", "tokenizer": "whitespace"}}},
    }
    assert definition["mappings"]["properties"] == {
        "chunk_id": {"type": "long"},
        "doc_id": {"type": "long"},
        "tenant_id": {"type": "long"},
        "body": {"type": "text", "analyzer": "pre_analyzed", "similarity": "retrieval_bm25", "index_options": "freqs"},
        "filters": {"type": "keyword"},
        "created_at": {"type": "long"},
    }


def test_es_an_existing_alias_is_written_without_touching_its_state(fake):
    fake.route("HEAD", "/_alias/unit-kbv-3", 200, {})
    fake.route("GET", "/unit-kbv-3/_mapping", body={"unit-kbv-3-0": {"mappings": {"_meta": STATE}}})
    fake.route("POST", "/unit-kbv-3/_delete_by_query", body={"deleted": 1, "failures": []})
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    es_index(fake.url).replace_documents(
        3, [10], [doc(42, "a", doc_id=10)], analyzer_version="new", dictionary_fingerprint="new"
    )
    assert not any(call.startswith("PUT /unit-kbv-3") for call in fake.calls())


def test_es_rebuild_fills_a_new_generation_then_swaps_atomically(fake):
    fake.route("PUT", r"/unit-kbv-3-\d+")
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", r"/unit-kbv-3-\d+/_refresh", body={})
    fake.route("GET", "/_alias/unit-kbv-3", body={"unit-kbv-3-0": {"aliases": {"unit-kbv-3": {}}}})
    fake.route("POST", "/_aliases")
    count = es_index(fake.url).rebuild(
        3, iter([doc(1, "a"), doc(2, "b")]), analyzer_version="a2", dictionary_fingerprint="f2"
    )

    assert count == 2
    create, load, refresh, _, swap = fake.requests
    target = create.path.lstrip("/")
    assert target != "unit-kbv-3-0" and "aliases" not in create.json()
    assert create.json()["mappings"]["_meta"] == {
        "analyzer_version": "a2",
        "dictionary_fingerprint": "f2",
        "filters": "1",
    }
    assert {line["index"]["_index"] for line in ndjson(load)[::2]} == {target}
    assert refresh.path == f"/{target}/_refresh"
    assert swap.json() == {
        "actions": [{"add": {"index": target, "alias": "unit-kbv-3"}}, {"remove_index": {"index": "unit-kbv-3-0"}}]
    }


def test_es_failed_rebuild_deletes_the_new_generation_and_keeps_the_alias(fake):
    fake.route("PUT", r"/unit-kbv-3-\d+")
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("DELETE", r"/unit-kbv-3-\d+")

    def failing_chunks():
        yield doc(1, "a")
        raise RuntimeError("the analyzer crashed")

    with pytest.raises(RuntimeError):
        es_index(fake.url).rebuild(3, failing_chunks(), **STATE)
    assert fake.calls()[-1] == f"DELETE {fake.requests[0].path}"
    assert not any("_aliases" in call for call in fake.calls())


def test_es_rejected_documents_are_a_lexical_index_error(fake):
    fake.route("HEAD", "/_alias/unit-kbv-3", 200, {})
    fake.route("GET", "/unit-kbv-3/_mapping", body={"unit-kbv-3-0": {"mappings": {"_meta": STATE}}})
    fake.route(
        "PUT|POST",
        "/_bulk",
        body=lambda r: {
            "errors": True,
            "items": [{"index": {"_id": "1", "status": 400, "error": {"type": "mapper_parsing_exception"}}}],
        },
    )
    with pytest.raises(LexicalIndexError) as caught:
        es_index(fake.url).replace_documents(3, [], [doc(1, "x")], **STATE)
    assert caught.value.cause == "request_error"


def test_es_drop_deletes_every_generation_by_name(fake):
    fake.route(
        "GET",
        r"/unit-kbv-3-\*/_alias",
        body={"unit-kbv-3-0": {"aliases": {"unit-kbv-3": {}}}, "unit-kbv-3-17": {"aliases": {}}},
    )
    fake.route("DELETE", "/unit-kbv-3-0,unit-kbv-3-17")
    es_index(fake.url).drop(3)
    assert fake.calls()[-1] == "DELETE /unit-kbv-3-0,unit-kbv-3-17"


def test_es_state_reads_meta_and_count(fake):
    fake.route("GET", "/unit-kbv-3/_mapping", body={"unit-kbv-3-0": {"mappings": {"_meta": STATE, "properties": {}}}})
    fake.route("GET|POST", "/unit-kbv-3/_count", body={"count": 12})
    state = es_index(fake.url).state(3)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a1", "f1", 12)


def test_es_state_of_a_missing_index_is_none(fake):
    fake.route("GET", "/unit-kbv-3/_mapping", 404, NOT_FOUND)
    assert es_index(fake.url).state(3) is None


def test_tantivy_failed_rebuild_keeps_the_old_index_serving(tmp_path):
    index = TantivyLexicalIndex(tmp_path)
    write(index, [doc(1, "keep me")])

    def broken_chunks():
        yield doc(2, "half built")
        raise RuntimeError("database went away")

    with pytest.raises(RuntimeError):
        index.rebuild(VERSION, broken_chunks(), **STATE)
    assert ids(search(index, "keep")) == [1]
    assert ids(search(index, "half")) == []
    assert len(list((tmp_path / f"kbv-{VERSION}").glob("gen-*"))) == 1


def test_tantivy_rebuild_removes_generations_a_killed_rebuild_left(tmp_path):
    index = TantivyLexicalIndex(tmp_path)
    write(index, [doc(1, "kept")])
    leftover = tmp_path / f"kbv-{VERSION}" / "gen-1"  # as a process killed while filling it leaves it
    leftover.mkdir()
    index.rebuild(VERSION, [doc(2, "rebuilt")], **STATE)
    assert len(list((tmp_path / f"kbv-{VERSION}").glob("gen-*"))) == 1
    assert ids(search(index, "rebuilt")) == [2]


def test_tantivy_reader_switches_to_a_rebuild_made_by_another_instance(tmp_path):
    reader, writer = TantivyLexicalIndex(tmp_path), TantivyLexicalIndex(tmp_path)
    write(writer, [doc(1, "old words")])
    assert ids(search(reader, "old")) == [1]
    writer.rebuild(VERSION, [doc(2, "new words")], **STATE)
    assert ids(search(reader, "old")) == []
    assert ids(search(reader, "new")) == [2]
    write(reader, [doc(3, "more words")])  # the reader's cached handle follows the switch for writes too
    assert ids(search(writer, "words")) == [2, 3] or ids(search(writer, "words")) == [3, 2]


def test_chunk_ids_lists_every_entry(index):
    assert index.chunk_ids(VERSION) == []
    write(index, [doc(1, "one", doc_id=10), doc(2, "two", doc_id=10), doc(3, "three", doc_id=11)])
    index.replace_documents(VERSION, [11], [], **STATE)
    assert sorted(index.chunk_ids(VERSION)) == [1, 2]
    index.replace_documents(VERSION, [], [doc(1, "one again", doc_id=12)], **STATE)  # a duplicate shows twice
    assert sorted(index.chunk_ids(VERSION)) == [1, 1, 2]


SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}


def test_es_chunk_ids_scrolls_ids_without_sources(fake):
    first = {"_scroll_id": "s1", "_shards": SHARDS, "hits": {"hits": [{"_id": "5"}, {"_id": "9"}]}}
    fake.route("POST", "/unit-kbv-3/_search", body=first)
    fake.route("POST", "/_search/scroll", body={"_scroll_id": "s1", "_shards": SHARDS, "hits": {"hits": []}})
    fake.route("DELETE", "/_search/scroll", body={"succeeded": True, "num_freed": 1})
    assert es_index(fake.url).chunk_ids(3) == [5, 9]
    assert fake.requests[0].json() == {"query": {"match_all": {}}, "_source": False, "size": 1000, "sort": "_doc"}


def test_es_chunk_ids_of_a_missing_index_is_empty(fake):
    fake.route("POST", "/unit-kbv-3/_search", 404, NOT_FOUND)
    assert es_index(fake.url).chunk_ids(3) == []


# --- the score ceiling ----------------------------------------------------------------------------


def test_the_score_ceiling_bounds_every_hit_and_is_approached_by_repetition(index, backend):
    write(index, [doc(1, "kettle lid"), doc(2, "kettle " * 40 + "lid " * 40), doc(3, "toaster"), doc(4, "lamp")])
    ceiling = index.max_score(VERSION, ["kettle", "lid"])
    # Lucene's idf of each token (held by 2 of 4 documents), scaled like the engine's scores
    assert ceiling == pytest.approx(2 * backend.scale * math.log(1 + (4 - 2 + 0.5) / (2 + 0.5)))
    hits = search(index, "kettle lid")
    assert all(hit.score <= ceiling for hit in hits)
    assert hits[0].chunk_id == 2 and hits[0].score > 0.8 * ceiling
    # A token no document holds counts as the rarest possible: no passage gets the whole ceiling.
    absent = backend.scale * math.log(1 + (4 + 0.5) / 0.5)
    assert index.max_score(VERSION, ["kettle", "lid", "absent"]) == pytest.approx(ceiling + absent)
    assert index.max_score(VERSION + 1, ["kettle"]) == 0.0


def test_weights_multiply_each_tokens_contribution_and_its_ceiling(index, backend):
    write(index, CORPUS)
    apple = {hit.chunk_id: hit.score for hit in search(index, "apple")}
    cherry = {hit.chunk_id: hit.score for hit in search(index, "cherry")}
    hits = index.search(VERSION, TENANT, ["apple", "cherry"], 10, None, [0.25, 2.0])
    weighted = {hit.chunk_id: hit.score for hit in hits}
    assert weighted.keys() == apple.keys() | cherry.keys()
    for chunk_id, score in weighted.items():
        assert score == pytest.approx(0.25 * apple.get(chunk_id, 0.0) + 2.0 * cherry.get(chunk_id, 0.0), rel=1e-5)
    ceiling = index.max_score(VERSION, ["apple", "cherry"], [0.25, 2.0])
    expected = 0.25 * index.max_score(VERSION, ["apple"]) + 2.0 * index.max_score(VERSION, ["cherry"])
    assert ceiling == pytest.approx(expected)


def test_es_weighted_search_boosts_each_term(fake):
    fake.route("POST", "/unit-kbv-3/_search", body={"hits": {"hits": []}})
    es_index(fake.url).search(3, TENANT, ["a", "b"], 5, None, [0.5, 2.0])
    (request,) = fake.requests
    assert request.json()["query"]["bool"]["should"] == [
        {"term": {"body": {"value": "a", "boost": 0.5}}},
        {"term": {"body": {"value": "b", "boost": 2.0}}},
    ]
