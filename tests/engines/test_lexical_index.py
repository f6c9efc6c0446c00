"""Contract of the lexical (BM25) engines, run against every backend: tantivy always, Elasticsearch
where ``ELASTICSEARCH_URL`` points at a server. Texts and queries are already analyzed (space-separated
tokens), so no analyzer is involved. The Elasticsearch adapter's requests, against a recording fake
server: tests/engines/test_elasticsearch_index.py."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import tantivy

from engines import tantivy_index
from engines.base import LexicalDocument, LexicalHit, LexicalIndexError
from engines.tantivy_index import TERM_QUERIES_UP_TO, TantivyLexicalIndex
from tests.concurrency import recorded_sleeps, wait_until
from tests.conftest import corrupt_keyword_index
from tests.engines.lexical_support import (
    K1,
    OTHER_TENANT,
    STATE,
    TENANT,
    VERSION,
    B,
    doc,
    ids,
    search,
    write,
)


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


def test_a_write_replaces_the_chunks_of_the_documents_it_names(index):
    write(index, [doc(1, "old words", doc_id=10), doc(2, "old text", doc_id=10), doc(3, "old kept", doc_id=11)])
    write(index, [doc(4, "new words", doc_id=10)])
    assert ids(search(index, "old")) == [3]
    assert ids(search(index, "new")) == [4]
    assert index.state(VERSION).num_docs == 2


def test_building_a_version_replaces_everything(index):
    write(index, [doc(1, "before"), doc(2, "before too")])
    assert index.build_version(VERSION, iter([doc(3, "after"), doc(4, "after all")]), **STATE) == 2
    assert search(index, "before") == []
    assert ids(search(index, "all")) == [4]
    assert index.state(VERSION).num_docs == 2


def test_a_dropped_version_has_no_index_and_missing_indexes_search_empty(index):
    assert search(index, "anything", version=VERSION + 5) == []
    write(index, [doc(1, "gone soon")])
    index.drop_version(VERSION)
    assert search(index, "gone") == []
    assert index.state(VERSION) is None
    index.drop_version(VERSION)  # absent: no-op


def test_a_delete_forgets_the_documents_entries_and_keeps_the_rest(index):
    index.delete(VERSION, [10])  # no index yet: nothing to do
    assert index.state(VERSION) is None
    write(index, [doc(1, "red apple", doc_id=10), doc(2, "green apple", doc_id=10), doc(3, "apple pie", doc_id=11)])
    index.delete(VERSION, [10, 99])
    assert ids(search(index, "apple")) == [3]
    assert sorted(index.chunk_ids(VERSION)) == [3]
    assert index.state(VERSION).num_docs == 1
    index.delete(VERSION, [])
    assert ids(search(index, "apple")) == [3]


def test_a_switch_leaves_both_versions_searchable(index):
    write(index, [doc(1, "old words")])
    write(index, [doc(2, "new words")], version=VERSION + 1)
    index.switch_version(VERSION, VERSION + 1)
    assert ids(search(index, "words", version=VERSION + 1)) == [2]
    assert ids(search(index, "words")) == [1]  # the rollback needs nothing rebuilt


def test_a_dropped_version_leaves_the_others(index):
    write(index, [doc(1, "kept words")], version=VERSION + 1)
    write(index, [doc(2, "dropped words")])
    index.drop_version(VERSION)
    assert ids(search(index, "words", version=VERSION + 1)) == [1]


def test_state_records_what_built_the_index(index):
    assert index.state(VERSION) is None
    write(index, [doc(1, "one"), doc(2, "two")], analyzer_version="a1", dictionary_fingerprint="f1")
    state = index.state(VERSION)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a1", "f1", 2)

    write(index, [doc(3, "three")], analyzer_version="a2", dictionary_fingerprint="f2")
    state = index.state(VERSION)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a1", "f1", 3)  # stays stale

    index.build_version(VERSION, [doc(3, "three")], analyzer_version="a2", dictionary_fingerprint="f2")
    state = index.state(VERSION)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a2", "f2", 1)


def test_a_failed_rebuild_keeps_the_old_index(index, backend, request):
    write(index, [doc(1, "precious")])

    def failing_chunks():
        yield doc(2, "replacement")
        raise RuntimeError("the analyzer crashed")

    with pytest.raises(RuntimeError):
        index.build_version(VERSION, failing_chunks(), analyzer_version="a2", dictionary_fingerprint="f2")
    assert ids(search(index, "precious")) == [1]
    assert index.state(VERSION).analyzer_version == "a1"


def test_readers_see_the_old_index_until_a_rebuild_completes(index, backend, request):
    write(index, [doc(1, "precious")])
    reader = backend.open()
    seen_during_rebuild = []

    def chunks():
        yield doc(2, "replacement")
        seen_during_rebuild.append(ids(search(reader, "precious")))

    index.build_version(VERSION, chunks(), **STATE)
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
    index.build_version(VERSION, [doc(2, "rebuilt words")], **STATE)
    assert ids(search(reader, "words")) == [2]


def test_another_instance_can_write_after_a_drop(index, backend, request):
    other = backend.open()
    write(other, [doc(1, "first")])
    index.drop_version(VERSION)
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


# --- tantivy: rebuilds, and the chunk ids of every backend ----------------------------------------


def test_tantivy_failed_rebuild_keeps_the_old_index_serving(tmp_path):
    index = TantivyLexicalIndex(tmp_path)
    write(index, [doc(1, "keep me")])

    def broken_chunks():
        yield doc(2, "half built")
        raise RuntimeError("database went away")

    with pytest.raises(RuntimeError):
        index.build_version(VERSION, broken_chunks(), **STATE)
    assert ids(search(index, "keep")) == [1]
    assert ids(search(index, "half")) == []
    assert len(list((tmp_path / f"kbv-{VERSION}").glob("gen-*"))) == 1


def test_tantivy_rebuild_removes_generations_a_killed_rebuild_left(tmp_path):
    index = TantivyLexicalIndex(tmp_path)
    write(index, [doc(1, "kept")])
    leftover = tmp_path / f"kbv-{VERSION}" / "gen-1"  # as a process killed while filling it leaves it
    leftover.mkdir()
    index.build_version(VERSION, [doc(2, "rebuilt")], **STATE)
    assert len(list((tmp_path / f"kbv-{VERSION}").glob("gen-*"))) == 1
    assert ids(search(index, "rebuilt")) == [2]


def test_tantivy_reader_switches_to_a_rebuild_made_by_another_instance(tmp_path):
    reader, writer = TantivyLexicalIndex(tmp_path), TantivyLexicalIndex(tmp_path)
    write(writer, [doc(1, "old words")])
    assert ids(search(reader, "old")) == [1]
    writer.build_version(VERSION, [doc(2, "new words")], **STATE)
    assert ids(search(reader, "old")) == []
    assert ids(search(reader, "new")) == [2]
    write(reader, [doc(3, "more words")])  # the reader's cached handle follows the switch for writes too
    assert ids(search(writer, "words")) == [2, 3] or ids(search(writer, "words")) == [3, 2]


def test_chunk_ids_lists_every_entry(index, backend):
    assert index.chunk_ids(VERSION) == []
    write(index, [doc(1, "one", doc_id=10), doc(2, "two", doc_id=10), doc(3, "three", doc_id=11)])
    index.write(VERSION, [], replacing=[11], **STATE)
    assert sorted(index.chunk_ids(VERSION)) == [1, 2]
    # A duplicate shows twice (check_kb repairs it); Elasticsearch's _id is the chunk id, so it cannot have one.
    index.write(VERSION, [doc(1, "one again", doc_id=12)], **STATE)
    assert sorted(index.chunk_ids(VERSION)) == ([1, 2] if backend.overwrites_ids else [1, 1, 2])


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
