"""Query rewriting by an OpenAI-compatible chat model: alternative phrasings the KB may use."""
from __future__ import annotations

import re
import threading

import httpx
from django.conf import settings

from engines.deadline import DeadlineExceeded, capped_timeout, within
from retrieval.expansion.base import ExpansionContext, ExpansionError, QueryExpander, QueryVariant
from retrieval.expansion.common import top_variants

MAX_LINE_CHARS = 300
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\(?\d+[.)])\s+")  # a marker needs a space: "1.5 inch" is a query
SYSTEM_PROMPT = (
    "You rewrite search queries for a document retrieval system. Reply with up to {n} alternative search "
    "queries for the user's query that could find the same information, one per line, in the same language "
    "as the query. Reply with the queries only: no numbering, no commentary."
)


def _endpoint(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/v1/chat/completions"


def parse_alternatives(content: str) -> list[str]:
    """The answer's lines without list markers, blanks and over-long lines (usually commentary)."""
    lines = (_LIST_MARKER.sub("", line).strip() for line in content.splitlines())
    return [line for line in lines if line and len(line) <= MAX_LINE_CHARS]


class LLMExpander(QueryExpander):
    """One chat completion per query, not retried, and over within ``SEARCH_DEADLINE_MS`` (each socket
    operation within ``LLM_TIMEOUT_S``): the search must not wait."""

    name = "llm"

    def __init__(self) -> None:
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @staticmethod
    def is_configured() -> bool:
        return bool(settings.LLM_URL)

    def _http(self) -> httpx.Client:
        """One pooled client per process (thread-safe); URL, key and timeout are read per request."""
        with self._lock:
            if self._client is None:
                self._client = httpx.Client()
            return self._client

    def expand(self, query: str, context: ExpansionContext) -> list[QueryVariant]:
        if not self.is_configured():
            raise ExpansionError("not_configured", "LLM_URL is not set")
        content = self._complete(query, context.max_expansions)
        weight = settings.LLM_WEIGHT
        variants = [QueryVariant(text=line, weight=weight, origin="llm") for line in parse_alternatives(content)]
        variants = top_variants(query, variants, context.max_expansions)
        if not variants:
            raise ExpansionError("malformed_response", "the LLM suggested no alternative query")
        return variants

    def _complete(self, query: str, count: int) -> str:
        url = _endpoint(settings.LLM_URL)
        api_key = settings.LLM_API_KEY
        payload = {
            "model": settings.LLM_MODEL,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT.format(n=count)},
                {"role": "user", "content": query},
            ],
            "temperature": 0,
            "max_tokens": 200,
        }
        deadline_s = settings.SEARCH_DEADLINE_MS / 1000
        try:
            response = within(
                deadline_s,
                lambda: self._http().post(
                    url,
                    json=payload,
                    headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                    timeout=capped_timeout(settings.LLM_TIMEOUT_S, deadline_s),
                ),
            )
        except DeadlineExceeded as exc:
            raise ExpansionError("deadline", f"LLM endpoint {url}: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise ExpansionError("timeout", f"LLM endpoint {url} timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise ExpansionError("connection_error", f"LLM endpoint {url} unreachable: {exc!r}") from exc
        if response.status_code == 429:
            raise ExpansionError("rate_limited", f"LLM endpoint {url} answered 429")
        if response.status_code >= 400:
            raise ExpansionError("server_error", f"LLM endpoint {url} answered {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ExpansionError("malformed_response", f"LLM endpoint {url} sent no completion: {exc!r}") from exc
        if not isinstance(content, str):
            raise ExpansionError("malformed_response", f"LLM endpoint {url} sent no text content")
        return content
