"""One chat completion from an OpenAI-compatible endpoint (``/v1/chat/completions``) within a total
deadline: the client the LLM query rewriter and the graph's triple extractor share.

Each call is not retried and is over within ``deadline_s`` (connect, send, every read: see
``engines.deadline``), each socket operation within ``timeout_s``. Failures raise :class:`LLMError`
with a cause: ``deadline``, ``timeout``, ``connection_error``, ``rate_limited``, ``server_error`` or
``malformed_response``.
"""

from __future__ import annotations

import threading

import httpx

from engines import metering
from engines.deadline import DeadlineExceeded, capped_timeout, within
from engines.errors import ComponentError


class LLMError(ComponentError):
    """The chat endpoint gave no usable completion; ``cause`` says why."""


def chat_endpoint(url: str) -> str:
    """A base URL gets ``/v1/chat/completions``; a URL ending in ``/chat/completions`` is used as is."""
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/v1/chat/completions"


class ChatClient:
    """One pooled HTTP client per process (thread-safe); URL, key and limits are given per call."""

    def __init__(self) -> None:
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client()
            return self._client

    def complete(
        self,
        url: str,
        api_key: str,
        payload: dict[str, object],
        *,
        timeout_s: float,
        deadline_s: float,
        purpose: str,
    ) -> str:
        """The text of the first choice of ``payload`` (a chat completion request body). Its tokens (the
        answer's ``usage``; 0 when the server sends none) are metered under ``purpose``, one of
        ``engines.metering.LLM_PURPOSES``."""
        if purpose not in metering.LLM_PURPOSES:
            raise ValueError(f"unknown LLM purpose {purpose!r}")
        url = chat_endpoint(url)
        try:
            response = within(
                deadline_s,
                lambda: self._http().post(
                    url,
                    json=payload,
                    headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                    timeout=capped_timeout(timeout_s, deadline_s),
                ),
            )
        except DeadlineExceeded as exc:
            raise LLMError("deadline", f"LLM endpoint {url}: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise LLMError("timeout", f"LLM endpoint {url} timed out: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise LLMError("connection_error", f"LLM endpoint {url} unreachable: {exc!r}") from exc
        if response.status_code == 429:
            raise LLMError("rate_limited", f"LLM endpoint {url} answered 429")
        if response.status_code >= 400:
            raise LLMError("server_error", f"LLM endpoint {url} answered {response.status_code}")
        try:
            answer = response.json()
            _meter_usage(purpose, answer)
            content = answer["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError("malformed_response", f"LLM endpoint {url} sent no completion: {exc!r}") from exc
        if not isinstance(content, str):
            raise LLMError("malformed_response", f"LLM endpoint {url} sent no text content")
        return content


def _meter_usage(purpose: str, answer: object) -> None:
    usage = answer.get("usage") if isinstance(answer, dict) else None
    usage = usage if isinstance(usage, dict) else {}

    def tokens(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    metering.record_llm(purpose, tokens("prompt_tokens"), tokens("completion_tokens"))


chat_client = ChatClient()
