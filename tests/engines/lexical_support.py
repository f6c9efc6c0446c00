"""What the lexical engines' tests share: analyzed texts (space-separated tokens) of one KB version and
tenant, written as ingestion writes them and searched as the BM25 leg searches; the backends the contract
runs on; a recording fake of Elasticsearch, and the adapter's requests to it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from engines.base import LexicalDocument, LexicalHit, LexicalIndex
from engines.elasticsearch_index import ElasticsearchLexicalIndex
from tests.peers import Peer, PeerRequest, Reply

K1, B = 1.2, 0.75


VERSION = 1


TENANT, OTHER_TENANT = 7, 8


STATE = {"analyzer_version": "a1", "dictionary_fingerprint": "f1"}


@dataclass
class Backend:
    name: str
    open: Callable[[], LexicalIndex]  # another instance on the same store, as another process opens it
    scale: float  # BM25's constant factor (k1 + 1): tantivy and Elasticsearch's configured BM25 keep it
    overwrites_ids: bool = False  # a chunk written twice is one entry (Elasticsearch's _id), not two


def doc(chunk_id: int, text: str, *, doc_id: int | None = None, tenant_id: int = TENANT) -> LexicalDocument:
    return LexicalDocument(
        chunk_id=chunk_id, doc_id=chunk_id if doc_id is None else doc_id, tenant_id=tenant_id, text=text
    )


def write(index: LexicalIndex, chunks: list[LexicalDocument], *, version: int = VERSION, **state: str) -> None:
    """Replaces the documents of ``chunks`` (ingestion's unit of work)."""
    index.write(version, chunks, replacing=sorted({c.doc_id for c in chunks}), **(STATE | state))


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


def es_index(url: str, **options) -> ElasticsearchLexicalIndex:
    return ElasticsearchLexicalIndex(url, prefix="Unit", request_timeout_s=2.0, max_retries=0, **options)


def bulk_ok(request: PeerRequest) -> dict:
    actions = ndjson(request)[::2]
    return {"took": 1, "errors": False, "items": [{"index": {**a["index"], "status": 201}} for a in actions]}


NOT_FOUND = {"error": {"type": "index_not_found_exception", "reason": "no such index"}, "status": 404}
