"""The rerank server of the rerankers' tests: a real HTTP server on 127.0.0.1 that scores a passage by its
word overlap with the query, so the right order is known, and injects faults on demand; it counts
requests, so retries and the circuit breaker are observable."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest

from engines.rerankers import RerankError
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


def rerank_error(reranker, passages: list[str] = PASSAGES) -> RerankError:
    with pytest.raises(RerankError) as info:
        reranker.rerank(QUERY, passages)
    return info.value


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
