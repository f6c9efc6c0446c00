"""``RetrievalClient`` and its async twin ``AsyncRetrievalClient``.

``timeout`` is the total deadline of one call, retries and waits included. A 429 or 503 answer and a
failed connection are retried up to ``retries`` times, after the answer's ``Retry-After`` (seconds or an
HTTP date) or else an exponential backoff; a wait that would pass the deadline is not taken and the last
error is raised instead. Searches are reads, so a retry is always safe.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import time
from typing import Any

import httpx

from retrieval_client.errors import (
    RateLimitedError,
    RetrievalError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
    error_for,
)
from retrieval_client.models import SearchResult

__version__ = "0.1.0"
SEARCH_PATH = "/api/v1/retrieval/"
_RETRYABLE = (RateLimitedError, ServiceUnavailableError, TransportError)


class _BaseClient:
    def __init__(self, base_url: str, api_key: str, timeout: float, retries: int, backoff_s: float):
        if timeout <= 0 or retries < 0 or backoff_s < 0:
            raise ValueError("timeout must be positive, retries and backoff_s not negative")
        self.base_url, self.timeout, self.retries, self.backoff_s = base_url.rstrip("/"), timeout, retries, backoff_s
        self._headers = {"Authorization": f"Bearer {api_key}", "User-Agent": f"retrieval-client/{__version__}"}

    @staticmethod
    def _request(mode: str | None, query: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(path, JSON body): ``mode=None`` is ``/search`` with the mode in the body."""
        body = {"query": query, **{key: value for key, value in options.items() if value is not None}}
        return SEARCH_PATH + (mode or "search"), body

    def _settle(
        self, answer: httpx.Response | httpx.TransportError, attempt: int, deadline: float
    ) -> tuple[SearchResult | None, float]:
        """The result of a successful answer, or the delay before the next attempt; raises when final."""
        if isinstance(answer, httpx.Response) and answer.status_code < 400:
            try:
                return SearchResult.from_dict(answer.json()), 0.0
            except (ValueError, TypeError, KeyError) as exc:
                raise ServerError(
                    f"unexpected answer: {exc}", code="malformed_response", status=answer.status_code
                ) from exc
        error = _error(answer)
        delay = error.retry_after if error.retry_after is not None else self.backoff_s * 2**attempt
        if not isinstance(error, _RETRYABLE) or attempt >= self.retries or time.monotonic() + delay >= deadline:
            raise error
        return None, delay


class RetrievalClient(_BaseClient):
    """``RetrievalClient("http://127.0.0.1:8000", api_key)``; use it as a context manager or ``close()`` it."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0, retries: int = 2, *, backoff_s: float = 0.5):
        super().__init__(base_url, api_key, timeout, retries, backoff_s)
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers)

    def search(self, query: str, *, mode: str = "hybrid", **options: Any) -> SearchResult:
        """``POST /api/v1/retrieval/search``. Options as the API's body: ``top_k``, ``kb_ids``, ``filters``,
        ``weights``, ``candidates``, ``fusion``, ``leg_weights``, ``leg_candidates``, ``rrf_k``,
        ``dense_weight_floor``, ``aggregate``, ``group_by``, ``rerank``, ``score_threshold``, ``expand``,
        ``principals`` (the end user; a key with the ``act_as`` scope)."""
        return self._search(None, query, {"mode": mode, **options})

    def hybrid(self, query: str, **options: Any) -> SearchResult:
        return self._search("hybrid", query, options)

    def bm25(self, query: str, **options: Any) -> SearchResult:
        return self._search("bm25", query, options)

    def vector(self, query: str, **options: Any) -> SearchResult:
        return self._search("vector", query, options)

    def graph(self, query: str, **options: Any) -> SearchResult:
        """Passages reached through the query's entities (``hops`` sets the neighbourhood)."""
        return self._search("graph", query, options)

    def _search(self, mode: str | None, query: str, options: dict[str, Any]) -> SearchResult:
        path, body = self._request(mode, query, options)
        deadline = time.monotonic() + self.timeout
        answer: httpx.Response | httpx.TransportError
        for attempt in itertools.count():
            try:
                answer = self._http.post(path, json=body, timeout=max(deadline - time.monotonic(), 0.001))
            except httpx.TransportError as exc:
                answer = exc
            result, delay = self._settle(answer, attempt, deadline)
            if result is not None:
                return result
            time.sleep(delay)
        raise AssertionError("itertools.count() does not end")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncRetrievalClient(_BaseClient):
    """The async twin: ``await client.hybrid(...)``; ``async with`` it or ``await aclose()``."""

    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0, retries: int = 2, *, backoff_s: float = 0.5):
        super().__init__(base_url, api_key, timeout, retries, backoff_s)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._headers)

    async def search(self, query: str, *, mode: str = "hybrid", **options: Any) -> SearchResult:
        return await self._search(None, query, {"mode": mode, **options})

    async def hybrid(self, query: str, **options: Any) -> SearchResult:
        return await self._search("hybrid", query, options)

    async def bm25(self, query: str, **options: Any) -> SearchResult:
        return await self._search("bm25", query, options)

    async def vector(self, query: str, **options: Any) -> SearchResult:
        return await self._search("vector", query, options)

    async def graph(self, query: str, **options: Any) -> SearchResult:
        return await self._search("graph", query, options)

    async def _search(self, mode: str | None, query: str, options: dict[str, Any]) -> SearchResult:
        path, body = self._request(mode, query, options)
        deadline = time.monotonic() + self.timeout
        answer: httpx.Response | httpx.TransportError
        for attempt in itertools.count():
            try:
                answer = await self._http.post(path, json=body, timeout=max(deadline - time.monotonic(), 0.001))
            except httpx.TransportError as exc:
                answer = exc
            result, delay = self._settle(answer, attempt, deadline)
            if result is not None:
                return result
            await asyncio.sleep(delay)
        raise AssertionError("itertools.count() does not end")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncRetrievalClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _error(answer: httpx.Response | httpx.TransportError) -> RetrievalError:
    if isinstance(answer, httpx.TransportError):
        return TransportError(str(answer) or type(answer).__name__, code=type(answer).__name__)
    try:
        body: Any = answer.json()
    except ValueError:
        body = answer.text
    return error_for(
        answer.status_code,
        body,
        request_id=answer.headers.get("X-Request-ID"),
        retry_after=_retry_after(answer.headers.get("Retry-After")),
    )


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())
