"""The Elasticsearch adapter's requests, against a recording fake server that runs everywhere; against a
real server the adapter runs the lexical contract (tests/engines/test_lexical_index.py) where
``ELASTICSEARCH_URL`` points at one."""

from __future__ import annotations

import dataclasses
import math
import socket

import pytest

from engines.base import LexicalHit, LexicalIndexError
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from tests.concurrency import wait_until
from tests.engines.lexical_support import (
    NOT_FOUND,
    STATE,
    TENANT,
    FakeElasticsearch,
    bulk_ok,
    doc,
    es_index,
    ndjson,
)


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
    # Lucene's idf times k1 + 1 (the configured BM25 keeps it), "b" in no document counts as the rarest,
    # "a" twice as searched
    idf_a, idf_b = math.log(1 + (10 - 2 + 0.5) / 2.5), math.log(1 + (10 + 0.5) / 0.5)
    assert ceiling == pytest.approx((1.2 + 1) * (2 * idf_a + idf_b))
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
    fake.route("POST", "/unit-kbv-3/_search", body={"_scroll_id": "s1", "hits": {"hits": []}})
    fake.route("DELETE", "/_search/scroll", body={"succeeded": True})
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    es_index(fake.url).write(3, [doc(42, "a b", doc_id=10)], replacing=[10], **STATE)

    assert fake.calls() == [
        "HEAD /_alias/unit-kbv-3",
        "PUT /unit-kbv-3-0",
        "POST /unit-kbv-3/_search",
        "DELETE /_search/scroll",
        "PUT /_bulk",
        "POST /unit-kbv-3/_refresh",
    ]
    create, find, load = fake.requests[1], fake.requests[2], fake.requests[4]
    assert create.json()["aliases"] == {"unit-kbv-3": {}}
    assert create.json()["mappings"]["_meta"] == {**STATE, "filters": "2"}  # business fields and ACL terms
    assert find.json()["query"] == {"terms": {"doc_id": [10]}}
    assert ndjson(load) == [
        {"index": {"_index": "unit-kbv-3", "_id": "42"}},
        {"chunk_id": 42, "doc_id": 10, "tenant_id": TENANT, "body": "a b"},
    ]


def test_es_index_definition(fake):
    fake.route("HEAD", "/_alias/unit-kbv-3", 404, {})
    fake.route("PUT", "/unit-kbv-3-0")
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    es_index(fake.url).write(3, [doc(1, "x")], **STATE)

    definition = fake.requests[1].json()
    assert definition["settings"] == {
        "number_of_shards": 1,
        "refresh_interval": "-1",
        "similarity": {"retrieval_bm25": {"type": "BM25", "k1": 1.2, "b": 0.75}},
    }
    assert definition["mappings"]["properties"] == {
        "chunk_id": {"type": "long"},
        "doc_id": {"type": "long"},
        "tenant_id": {"type": "long"},
        "body": {"type": "text", "analyzer": "whitespace", "similarity": "retrieval_bm25", "index_options": "freqs"},
        "filters": {"type": "keyword"},
        "created_at": {"type": "long"},
    }


def test_es_an_existing_alias_is_written_without_touching_its_state(fake):
    fake.route("HEAD", "/_alias/unit-kbv-3", 200, {})
    fake.route("GET", "/unit-kbv-3/_mapping", body={"unit-kbv-3-0": {"mappings": {"_meta": STATE}}})
    fake.route("POST", "/unit-kbv-3/_search", body={"_scroll_id": "s1", "hits": {"hits": []}})
    fake.route("DELETE", "/_search/scroll", body={"succeeded": True})
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", "/unit-kbv-3/_refresh", body={})
    es_index(fake.url).write(
        3, [doc(42, "a", doc_id=10)], replacing=[10], analyzer_version="new", dictionary_fingerprint="new"
    )
    assert not any(call.startswith("PUT /unit-kbv-3") for call in fake.calls())


def test_es_rebuild_fills_a_new_generation_then_swaps_atomically(fake):
    fake.route("PUT", r"/unit-kbv-3-\d+")
    fake.route("PUT|POST", "/_bulk", body=bulk_ok)
    fake.route("POST", r"/unit-kbv-3-\d+/_refresh", body={})
    fake.route("GET", "/_alias/unit-kbv-3", body={"unit-kbv-3-0": {"aliases": {"unit-kbv-3": {}}}})
    fake.route("POST", "/_aliases")
    count = es_index(fake.url).build_version(
        3, iter([doc(1, "a"), doc(2, "b")]), analyzer_version="a2", dictionary_fingerprint="f2"
    )

    assert count == 2
    create, load, refresh, _, swap = fake.requests
    target = create.path.lstrip("/")
    assert target != "unit-kbv-3-0" and "aliases" not in create.json()
    assert create.json()["mappings"]["_meta"] == {
        "analyzer_version": "a2",
        "dictionary_fingerprint": "f2",
        "filters": "2",
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
        es_index(fake.url).build_version(3, failing_chunks(), **STATE)
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
        es_index(fake.url).write(3, [doc(1, "x")], **STATE)
    assert caught.value.cause == "request_error"


def test_es_drop_deletes_every_generation_by_name(fake):
    fake.route(
        "GET",
        r"/unit-kbv-3-\*/_alias",
        body={"unit-kbv-3-0": {"aliases": {"unit-kbv-3": {}}}, "unit-kbv-3-17": {"aliases": {}}},
    )
    fake.route("DELETE", "/unit-kbv-3-0,unit-kbv-3-17")
    es_index(fake.url).drop_version(3)
    assert fake.calls()[-1] == "DELETE /unit-kbv-3-0,unit-kbv-3-17"


def test_es_state_reads_meta_and_count(fake):
    fake.route("GET", "/unit-kbv-3/_mapping", body={"unit-kbv-3-0": {"mappings": {"_meta": STATE, "properties": {}}}})
    fake.route("GET|POST", "/unit-kbv-3/_count", body={"count": 12})
    state = es_index(fake.url).state(3)
    assert (state.analyzer_version, state.dictionary_fingerprint, state.num_docs) == ("a1", "f1", 12)


def test_es_state_of_a_missing_index_is_none(fake):
    fake.route("GET", "/unit-kbv-3/_mapping", 404, NOT_FOUND)
    assert es_index(fake.url).state(3) is None


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


def test_es_weighted_search_boosts_each_term(fake):
    fake.route("POST", "/unit-kbv-3/_search", body={"hits": {"hits": []}})
    es_index(fake.url).search(3, TENANT, ["a", "b"], 5, None, [0.5, 2.0])
    (request,) = fake.requests
    assert request.json()["query"]["bool"]["should"] == [
        {"term": {"body": {"value": "a", "boost": 0.5}}},
        {"term": {"body": {"value": "b", "boost": 2.0}}},
    ]
