"""Fixtures of the retrieval tests: the API tests' corpus, the sample KB split into two community levels,
and Dify's side of its External Knowledge API, replayed: the requests langgenius/dify sends
(``api/services/knowledge/external/service.py`` through ``api/core/helper/ssrf_proxy.py``) and how it
reads the answers (``execute_external_knowledge_retrieval``; citations in
``api/services/knowledge/retrieval/dataset_retrieval.py``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx
import pytest
from django.core.wsgi import get_wsgi_application

from tests.retrieval.api_corpus import ASTRONOMY, MANUALS, build_corpus

# ssrf_proxy: STATUS_FORCELIST, BACKOFF_FACTOR, SSRF_DEFAULT_MAX_RETRIES and SSRF_DEFAULT_*_TIME_OUT.
RETRIED_STATUSES = (429, 500, 502, 503, 504)
BACKOFF_S = 0.5
MAX_RETRIES = 3
TIMEOUT = httpx.Timeout(5, connect=5, read=5, write=5)
# check_endpoint_and_api_key's validation payload.
PROBE = {"knowledge_id": "", "query": "", "retrieval_setting": {"top_k": 1, "score_threshold": 0.0}}


class MaxRetriesExceeded(Exception):
    """ssrf_proxy's MaxRetriesExceededError: what Dify shows after four 429/5xx answers or timeouts."""


class DifyRefused(Exception):
    """Dify's answer to a failed check or retrieval (ValueError / ExternalKnowledgeRetrievalError)."""


@dataclass
class DifyClient:
    endpoint: str  # what the admin types into Dify, e.g. http://host/api/v1/dify
    api_key: str
    transport: httpx.BaseTransport | None = None  # None: a real socket
    attempts: list[httpx.Response | httpx.RequestError] = field(default_factory=list)

    def post(self, headers: dict, content: bytes | None) -> httpx.Response:
        """``ssrf_proxy.make_request``: a new client per attempt, a retry after 0.5, 1 and 2 s on a
        listed status or a transport error (``Retry-After`` is not read)."""
        for retry in range(MAX_RETRIES + 1):
            if retry:
                time.sleep(BACKOFF_S * 2 ** (retry - 1))
            try:
                with httpx.Client(transport=self.transport) as client:
                    response = client.request(
                        "POST", f"{self.endpoint}/retrieval", headers=headers, content=content,
                        timeout=TIMEOUT, follow_redirects=True,
                    )  # fmt: skip
            except httpx.RequestError as exc:
                self.attempts.append(exc)
                continue
            self.attempts.append(response)
            if response.status_code not in RETRIED_STATUSES:
                return response
        raise MaxRetriesExceeded(f"Reached maximum retries ({MAX_RETRIES}) for URL {self.endpoint}/retrieval")

    def register(self, *, body_less: bool = False) -> httpx.Response:
        """``check_endpoint_and_api_key``: the probe (before Dify 1.x: an empty POST), refused on 502/404/403."""
        if body_less:
            response = self.post({"Authorization": f"Bearer {self.api_key}"}, None)
        else:
            headers = {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"}
            response = self.post(headers, json.dumps(PROBE).encode())
        if response.status_code in (502, 404, 403):
            raise DifyRefused(f"{response.status_code}: failed to connect to the endpoint")
        return response

    def retrieve(self, body: bytes) -> list[dict]:
        """``execute_external_knowledge_retrieval`` on the bytes ``prepare_external_knowledge_retrieval``
        builds (``json.dumps`` of its dict), then each record as Dify's ``Document`` takes it."""
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"}
        response = self.post(headers, body)
        if response.status_code != 200:
            raise DifyRefused(response.text)
        payload = response.json()
        if not isinstance(payload, dict) or not isinstance(payload.get("records", []), list):
            raise DifyRefused("invalid external knowledge response")
        records = payload.get("records", [])
        for record in records:
            assert isinstance(record.get("content"), str), record  # Document.page_content
            assert isinstance(record.get("metadata"), dict), record  # Document.metadata
            float(record.get("score") or 0.0)
        return records


def dify_citations(records: list[dict]) -> list[dict]:
    """``knowledge_retrieval``'s sources of external records: keyed by ``metadata.document_id``, else
    the title, and sorted by score (a stable sort)."""
    sources = []
    for record in records:
        title = record.get("title") or ""
        meta = {**record["metadata"], "score": record.get("score"), "title": title}
        sources.append(
            {
                "document_id": str(meta.get("document_id") or title),
                "document_name": title,
                "score": float(meta.get("score") or 0.0),
                "content": record["content"],
                "doc_metadata": meta,
            }
        )
    return sorted(sources, key=lambda source: source["score"], reverse=True)


@pytest.fixture
def in_process(keep_test_transaction) -> httpx.WSGITransport:
    """Dify's bytes handed to the application in this process, inside the test's transaction."""
    return httpx.WSGITransport(app=get_wsgi_application())


@pytest.fixture
def pipeline_runs(monkeypatch) -> list:
    """The requests the search pipeline actually ran (cache hits, exact or semantic, do not run it)."""
    from retrieval import cache
    from retrieval.services.search import search

    runs: list = []

    def counted_search(tenant, request, knowledge=None, **options):
        runs.append(request)
        return search(tenant, request, knowledge, **options)

    monkeypatch.setattr(cache, "search", counted_search)
    return runs


@pytest.fixture
def two_levels(curated_sample_kb, settings):
    """The curated sample KB's communities split down to level 1 (its graph of names and curated terms has
    no community above the default split size), for this test only (its transaction is undone)."""
    from graph.community_build import rebuild_communities
    from knowledge.models import GraphCommunity

    settings.GRAPH_COMMUNITY_SPLIT_SIZE = 5
    rebuild_communities(curated_sample_kb.active_version)
    assert GraphCommunity.objects.filter(kb_version=curated_sample_kb.active_version, level=1).exists()
    return curated_sample_kb


@pytest.fixture
def corpus(tmp_path, tenant, embedder):
    """The caller's tenant: KB "manuals" (3 documents) and KB "astronomy" (1 document)."""
    return build_corpus(tmp_path, tenant, {"manuals": MANUALS, "astronomy": ASTRONOMY})


@pytest.fixture
def filter_rows(db):
    """Rows with known business fields and metadata for the filter tests (tests/retrieval/filter_rows.py)."""
    from tests.retrieval.filter_rows import build_dataset

    return build_dataset()
