"""The remote reranker against the rerank server (tests/engines/rerank_support.py): its request and
response shapes, failures, retries and deadline, and its circuit breaker."""

from __future__ import annotations

import math
import socket
import threading

import numpy as np
import pytest

from engines.rerankers import RerankError
from engines.rerankers.remote import RemoteReranker
from tests.concurrency import wait_until
from tests.engines.rerank_support import (
    EXPECTED,
    PASSAGES,
    QUERY,
    closed_port_url,
    rerank_error,
    tei_scores,
    v1_scores,
)
from tests.peers import Reply

# --- request and response shapes -------------------------------------------------------------------


def test_v1_rerank_sends_the_v1_request_and_maps_scores_by_index(overlap_server, make_reranker):
    reranker = make_reranker(model="bge-reranker-v2-m3", api_key="sk-test")

    scores = reranker.rerank(QUERY, PASSAGES)

    assert scores == EXPECTED
    assert PASSAGES[int(np.argmax(scores))] == "cats sit on warm mats"
    [request] = overlap_server.requests
    assert request.path == "/v1/rerank"
    assert request.headers.get("authorization") == "Bearer sk-test"
    assert request.json() == {
        "model": "bge-reranker-v2-m3",
        "query": QUERY,
        "documents": PASSAGES,
        "top_n": 3,
        "return_documents": False,
    }
    assert reranker.name == "remote:bge-reranker-v2-m3"


def test_without_model_or_key_sends_neither_and_is_named_by_host(overlap_server, make_reranker):
    reranker = make_reranker()

    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
    [request] = overlap_server.requests
    assert request.headers.get("authorization") is None
    assert "model" not in request.json()
    assert reranker.name == "remote:127.0.0.1"


@pytest.mark.parametrize("suffix", ["/", "/v1", "/v1/rerank"])
def test_v1_urls_all_reach_v1_rerank(overlap_server, make_reranker, suffix):
    assert make_reranker(overlap_server.url + suffix).rerank(QUERY, PASSAGES) == EXPECTED
    assert overlap_server.requests[0].path == "/v1/rerank"


def test_unversioned_rerank_url_speaks_tei(overlap_server, make_reranker):
    overlap_server.reply_with(tei_scores)

    assert make_reranker(overlap_server.url + "/rerank").rerank(QUERY, PASSAGES) == EXPECTED
    [request] = overlap_server.requests
    assert request.path == "/rerank"
    assert request.json() == {"query": QUERY, "texts": PASSAGES, "truncate": True}


def test_results_with_plain_score_keys_are_accepted(overlap_server, make_reranker):
    results = [{"index": 2, "score": 1}, {"index": 0, "score": 0.0}, {"index": 1, "score": 4}]
    overlap_server.reply_with(Reply(body={"results": results}))

    assert make_reranker().rerank(QUERY, PASSAGES) == EXPECTED


def test_no_passages_needs_no_request(overlap_server, make_reranker):
    assert make_reranker().rerank(QUERY, []) == []
    assert overlap_server.requests == []


def scored(*pairs) -> dict:
    return {"results": [{"index": index, "relevance_score": score} for index, score in pairs]}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>502 Bad Gateway</html>", id="not-json"),
        pytest.param(scored((0, 0.1), (1, None), (2, 0.3)), id="null-score"),
        pytest.param({"results": [{"index": 0}, {"index": 1}, {"index": 2}]}, id="missing-score"),
        pytest.param(scored((0, 0.1), (0, 0.2), (2, 0.3)), id="duplicate-index"),
        pytest.param(scored((0, 0.1), (1, 0.2), (3, 0.3)), id="out-of-range-index"),
        pytest.param(scored((0, 0.1), (1, 0.2)), id="fewer-results"),
        pytest.param(scored((0, 0.1), (1, 0.2), (2, 0.3), (2, 0.4)), id="more-results"),
        pytest.param(scored((0, 0.1), (1, "NaN"), (2, 0.3)), id="nan-string"),
        pytest.param(scored((0, 0.1), (1, math.nan), (2, 0.3)), id="nan-literal"),
        pytest.param(scored((0, 0.1), (1, math.inf), (2, 0.3)), id="infinity"),
        pytest.param(scored((0, 0.1), (1, True), (2, 0.3)), id="boolean-score"),
        pytest.param(scored(("0", 0.1), (1, 0.2), (2, 0.3)), id="string-index"),
        pytest.param({"results": {"0": 0.1, "1": 0.2, "2": 0.3}}, id="results-not-a-list"),
        pytest.param({"data": []}, id="no-results"),
        pytest.param([0.1, 0.2, 0.3], id="bare-scores"),
        pytest.param("ok", id="json-string"),
    ],
)
def test_malformed_answers_fail_without_retry(overlap_server, make_reranker, body):
    overlap_server.reply_with(Reply(body=body))

    assert rerank_error(make_reranker(retries=2)).cause == "malformed_response"
    assert len(overlap_server.requests) == 1


# --- failures and retries --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        (Reply(500, {"error": "boom"}), "server_error"),
        (Reply(503), "server_error"),
        (Reply(429), "rate_limited"),
        (Reply(delay_s=2.0), "timeout"),
    ],
    ids=["500", "503", "429", "timeout"],
)
def test_transient_failures_are_retried_then_reported(overlap_server, make_reranker, reply, cause):
    overlap_server.reply_with(reply)
    reranker = make_reranker(timeout_s=0.2, retries=2)

    assert rerank_error(reranker).cause == cause

    assert len(overlap_server.requests) == 3
    ended = "hung_up" if cause == "timeout" else "answered"  # a timed-out attempt closed its connection
    wait_until(
        lambda: all(request.outcome == ended for request in overlap_server.requests), message=f"3 requests {ended}"
    )


@pytest.mark.parametrize(
    "reply", [Reply(body={"results": []}, drip_s=0.2), Reply(delay_s=60)], ids=["drips", "answers-too-late"]
)
def test_a_slow_peer_is_cut_off_at_the_total_deadline(overlap_server, make_reranker, reply):
    """One byte every 200 ms never trips a 1 s read timeout; retries could add up: the deadline bounds all.
    The answer would take far longer than the deadline, so none has reached the client when it gives up."""
    overlap_server.reply_with(reply)
    reranker = make_reranker(timeout_s=1.0, deadline_s=0.5, retries=3)
    assert rerank_error(reranker).cause == "deadline"
    assert overlap_server.requests and "answered" not in [request.outcome for request in overlap_server.requests]


def test_a_peer_that_never_answers_is_cut_off_at_the_deadline(make_reranker):
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        reranker = make_reranker(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=5.0, deadline_s=0.5)
        assert rerank_error(reranker).cause == "deadline"
        connection, _ = silent.accept()  # the call's connection, waiting in the backlog
        with connection:
            connection.settimeout(30)  # only ends a wait that would hang
            while connection.recv(65536):  # the request, then end of file once the client closes
                pass


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_fail_at_once(overlap_server, make_reranker, status):
    overlap_server.reply_with(Reply(status, {"error": "bad request"}))

    error = rerank_error(make_reranker(retries=2))

    assert error.cause == "server_error"
    assert str(status) in error.message
    assert len(overlap_server.requests) == 1


def test_a_503_then_success_is_retried_into_scores(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(503), v1_scores)

    assert make_reranker(retries=1).rerank(QUERY, PASSAGES) == EXPECTED
    assert len(overlap_server.requests) == 2


def test_connection_refused(make_reranker):
    """Reported as refused, not as a timeout or the deadline: the client did not wait for an answer."""
    assert rerank_error(make_reranker(closed_port_url(), retries=1)).cause == "connection_error"


def recorded_waits(reranker: RemoteReranker) -> list[float]:
    """The waits the reranker decides on after each retryable failure, in order; tenacity sleeps each
    one that another attempt follows (it decides one after the last attempt too, then stops)."""
    waits: list[float] = []
    decide = reranker._wait
    reranker._wait = lambda state: waits.append(decide(state)) or waits[-1]
    return waits


def test_backoff_grows_exponentially_up_to_its_cap(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(500))
    reranker = make_reranker(retries=3, backoff_s=0.05, max_backoff_s=0.1)
    waits = recorded_waits(reranker)

    rerank_error(reranker)

    assert len(overlap_server.requests) == 4
    assert waits[:3] == pytest.approx([0.05, 0.1, 0.1])


def test_retry_after_within_the_cap_is_honoured(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(429, headers={"Retry-After": "0.3"}), v1_scores)
    reranker = make_reranker(retries=1, max_backoff_s=1.0)
    waits = recorded_waits(reranker)

    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED

    assert len(overlap_server.requests) == 2
    assert waits == [0.3]


def test_retry_after_beyond_the_cap_fails_at_once(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(429, headers={"Retry-After": "120"}))
    reranker = make_reranker(retries=2, max_backoff_s=1.0)
    waits = recorded_waits(reranker)

    assert rerank_error(reranker).cause == "rate_limited"

    assert len(overlap_server.requests) == 1
    assert waits == []


def test_concurrent_calls_run_in_parallel(overlap_server, make_reranker):
    """The breaker must not queue searches behind each other (pybreaker's own call() would): the peer
    answers none of the three calls before all three have arrived, which queued calls never would."""
    all_arrived = threading.Barrier(3)
    overlap_server.reply_with(lambda body: (all_arrived.wait(timeout=30), v1_scores(body))[1])
    reranker = make_reranker(timeout_s=30, deadline_s=30)
    results: list[list[float]] = []

    threads = [threading.Thread(target=lambda: results.append(reranker.rerank(QUERY, PASSAGES))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == [EXPECTED] * 3


# --- circuit breaker -------------------------------------------------------------------------------


def test_breaker_opens_after_fail_max_failed_calls_and_then_sends_nothing(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(500))
    reranker = make_reranker(retries=1, breaker_fail_max=3, breaker_reset_s=30)

    for _ in range(3):
        assert rerank_error(reranker).cause == "server_error"
    assert len(overlap_server.requests) == 3 * 2  # a call with its retries counts once

    for _ in range(5):
        assert rerank_error(reranker).cause == "circuit_open"
    assert len(overlap_server.requests) == 6


def test_malformed_answers_count_as_failures(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(body=b"not json"))
    reranker = make_reranker(breaker_fail_max=2)

    causes = [rerank_error(reranker).cause for _ in range(3)]
    assert causes == ["malformed_response", "malformed_response", "circuit_open"]
    assert len(overlap_server.requests) == 2


def test_a_success_resets_the_failure_count(overlap_server, make_reranker):
    overlap_server.reply_with(Reply(500), v1_scores, Reply(500))
    reranker = make_reranker(retries=0, breaker_fail_max=2)

    assert rerank_error(reranker).cause == "server_error"
    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
    assert rerank_error(reranker).cause == "server_error"
    assert len(overlap_server.requests) == 3


def open_breaker(overlap_server, reranker) -> None:
    overlap_server.reply_with(Reply(500))
    while rerank_error(reranker).cause != "circuit_open":
        pass


def trial_call(reranker) -> list[float] | RerankError:
    """The first call the open breaker lets through once its reset time is up (the calls it refuses
    send nothing): that trial's scores, or its error."""

    def attempt() -> list[float] | RerankError | None:
        try:
            return reranker.rerank(QUERY, PASSAGES)
        except RerankError as error:
            return None if error.cause == "circuit_open" else error

    return wait_until(attempt, message="the open breaker to let a trial call through")


def test_half_open_trial_success_closes_the_breaker(overlap_server, make_reranker):
    reranker = make_reranker(retries=0, breaker_fail_max=2, breaker_reset_s=0.2)
    open_breaker(overlap_server, reranker)
    overlap_server.reply_with(v1_scores)

    assert trial_call(reranker) == EXPECTED
    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
    assert len(overlap_server.requests) == 4


def test_half_open_trial_failure_reopens_the_breaker(overlap_server, make_reranker):
    reranker = make_reranker(retries=0, breaker_fail_max=2, breaker_reset_s=0.2)
    open_breaker(overlap_server, reranker)

    assert trial_call(reranker).cause == "server_error"  # the trial reached the overlap_server
    assert rerank_error(reranker).cause == "circuit_open"
    assert len(overlap_server.requests) == 3


def test_half_open_lets_only_one_trial_through(overlap_server, make_reranker):
    reranker = make_reranker(retries=0, breaker_fail_max=1, breaker_reset_s=0.2, timeout_s=30, deadline_s=30)
    open_breaker(overlap_server, reranker)
    release = threading.Event()  # the trial's answer waits for it
    overlap_server.reply_with(lambda body: (release.wait(30), v1_scores(body))[1])
    trial_result: list[list[float] | RerankError] = []
    trial = threading.Thread(target=lambda: trial_result.append(trial_call(reranker)))

    trial.start()
    wait_until(lambda: len(overlap_server.requests) == 2, message="the trial call to reach the server")
    assert rerank_error(reranker).cause == "circuit_open"
    release.set()
    trial.join()

    assert trial_result == [EXPECTED]
    assert len(overlap_server.requests) == 2
    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
