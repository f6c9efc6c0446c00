from __future__ import annotations

import contextlib
import email.utils
import math
import re
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pybreaker
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from engines import metering
from engines.deadline import DeadlineExceeded, capped_timeout, within
from engines.rerankers.base import Reranker, RerankError


class _TransientError(RerankError):
    """A failure that may pass (timeout, 429, 5xx, network); ``retry_after`` is the server's asked wait."""

    def __init__(self, cause: str, message: str, retry_after: float | None = None):
        super().__init__(cause, message)
        self.retry_after = retry_after


class _CallFailed(Exception):
    """Tells the circuit breaker that a finished call failed."""


class RemoteReranker(Reranker):
    """A remote rerank endpoint: the ``/v1/rerank`` shape (llama.cpp, vLLM, Xinference, SiliconFlow, Jina,
    Cohere) or TEI's ``/rerank``.

    A base URL (or one ending in ``/v1``) gets ``/v1/rerank``; a URL ending in ``/v<n>/rerank`` is used as
    is; an unversioned ``/rerank`` is TEI's and gets TEI's request (``texts``). Either response shape is
    accepted. Retries cover only failures that may pass, within a bounded backoff, and the whole call,
    retries included, ends within ``deadline_s`` (cause ``deadline``), so one search never waits long. The
    circuit breaker stops calling a dead endpoint, so searches degrade at once instead of
    each paying the timeout.
    """

    def __init__(
        self,
        url: str,
        *,
        model: str = "",
        api_key: str = "",
        timeout_s: float = 2.0,
        deadline_s: float = 2.0,
        retries: int = 1,
        backoff_s: float = 0.1,
        max_backoff_s: float = 1.0,
        breaker_fail_max: int = 5,
        breaker_reset_s: float = 30.0,
    ):
        self._url, self._tei = _endpoint(url)
        self._model = model
        self._timeout_s = capped_timeout(timeout_s, deadline_s)
        self._deadline_s = deadline_s
        self.name = f"remote:{model or httpx.URL(url).host}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=self._timeout_s, headers=headers)
        self._attempts = 1 + max(0, retries)
        self._max_backoff_s = max_backoff_s
        self._backoff = wait_exponential(multiplier=backoff_s, max=max_backoff_s)
        self._breaker_storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self._breaker = pybreaker.CircuitBreaker(
            fail_max=breaker_fail_max, reset_timeout=breaker_reset_s, state_storage=self._breaker_storage
        )
        # pybreaker's call() holds one lock for the whole guarded call, which would queue every concurrent
        # search behind one slow request; so requests run outside it and only outcomes go through it.
        self._gate = threading.Lock()
        self._trial_running = False

    def rerank(self, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        retrying = Retrying(
            stop=stop_after_attempt(self._attempts),
            wait=self._wait,
            retry=retry_if_exception(self._is_retryable),
            reraise=True,
        )
        trial = self._admit()
        try:
            scores = within(self._deadline_s, lambda: retrying(self._post, query, passages))
        except DeadlineExceeded as exc:
            self._record(failed=True, trial=trial)
            raise RerankError("deadline", f"{self.name}: {exc}") from exc
        except BaseException:
            self._record(failed=True, trial=trial)
            raise
        self._record(failed=False, trial=trial)
        metering.record(rerank_calls=1, rerank_pairs=len(passages))
        return scores

    def close(self) -> None:
        self._client.close()

    @property
    def circuit_open(self) -> bool:
        """Open (or half open, its trial call not yet answered): until a call succeeds again."""
        return self._breaker.current_state != pybreaker.STATE_CLOSED

    def _admit(self) -> bool:
        """Fail fast while the breaker is open; once it may reset, let one trial call through (True)."""
        with self._gate:
            state = self._breaker.current_state
            if state == pybreaker.STATE_CLOSED:
                return False
            opened_at = self._breaker_storage.opened_at
            assert opened_at is not None  # set whenever the breaker is not closed
            reopens_at = opened_at + timedelta(seconds=self._breaker.reset_timeout)
            if self._trial_running or (state == pybreaker.STATE_OPEN and datetime.now(UTC) < reopens_at):
                raise RerankError(
                    "circuit_open",
                    f"{self.name}: circuit open after {self._breaker.fail_max} consecutive failures",
                )
            self._breaker.half_open()
            self._trial_running = True
            return True

    def _record(self, failed: bool, trial: bool) -> None:
        """Count the outcome; a call that started before the breaker opened no longer counts."""
        with self._gate:
            if trial:
                self._trial_running = False
            elif self._breaker.current_state != pybreaker.STATE_CLOSED:
                return

            def outcome() -> None:
                if failed:
                    raise _CallFailed

            with contextlib.suppress(_CallFailed, pybreaker.CircuitBreakerError):
                self._breaker.call(outcome)

    def _is_retryable(self, error: BaseException) -> bool:
        """Transient failures, unless the server asks for a longer wait than a search can afford."""
        return isinstance(error, _TransientError) and (
            error.retry_after is None or error.retry_after <= self._max_backoff_s
        )

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _TransientError) and error.retry_after is not None:
            return error.retry_after
        return self._backoff(state)

    def _post(self, query: str, passages: list[str]) -> list[float]:
        if self._tei:
            body: dict[str, object] = {"query": query, "texts": passages, "truncate": True}
        else:
            body = {"model": self._model} if self._model else {}
            body |= {"query": query, "documents": passages, "top_n": len(passages), "return_documents": False}
        try:
            response = self._client.post(self._url, json=body)
        except httpx.TimeoutException as exc:
            raise _TransientError("timeout", f"{self.name} gave no answer within {self._timeout_s}s") from exc
        except httpx.HTTPError as exc:
            raise _TransientError("connection_error", f"{self.name} unreachable at {self._url}: {exc!r}") from exc
        status = response.status_code
        if status == 429 or status >= 500:
            cause = "rate_limited" if status == 429 else "server_error"
            raise _TransientError(cause, f"{self.name} answered HTTP {status}", _retry_after(response))
        if not response.is_success:
            raise RerankError("server_error", f"{self.name} answered HTTP {status}: {response.text[:200]}")
        try:
            return _parse_scores(response.json(), len(passages))
        except (ValueError, OverflowError) as exc:
            raise RerankError("malformed_response", f"{self.name} sent an unusable answer: {exc}") from exc


def _endpoint(url: str) -> tuple[str, bool]:
    """The URL to POST to, and whether it is TEI's (unversioned ``/rerank``, which wants ``texts``)."""
    url = url.rstrip("/")
    path = httpx.URL(url).path
    if path.endswith("/rerank"):
        return url, re.search(r"/v\d+/rerank$", path) is None
    if re.search(r"/v\d+$", path):
        return f"{url}/rerank", False
    return f"{url}/v1/rerank", False


def _retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or HTTP-date), or None when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = (email.utils.parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds)


def _parse_scores(payload: object, count: int) -> list[float]:
    """Scores in passage order: every index 0..count-1 exactly once, every score a finite number."""
    items = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(items, list) or len(items) != count:
        raise ValueError(f"expected a list of {count} results, got {type(items).__name__} {str(items)[:80]}")
    scores: dict[int, float] = {}
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"result {item!r} is not an object")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if type(index) is not int or not 0 <= index < count or index in scores:
            raise ValueError(f"index {index!r} is out of range, repeated or not an integer")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ValueError(f"score {score!r} at index {index} is not a finite number")
        scores[index] = float(score)
    return [scores[index] for index in range(count)]
