"""Query rewriting by an OpenAI-compatible chat model: alternative phrasings the KB may use."""

from __future__ import annotations

import re

from django.conf import settings

from engines.llm import LLMError, chat_client
from retrieval.expansion.base import ExpansionContext, ExpansionError, QueryExpander, QueryVariant
from retrieval.expansion.common import top_variants

MAX_LINE_CHARS = 300
_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\(?\d+[.)])\s+")  # a marker needs a space: "1.5 inch" is a query
SYSTEM_PROMPT = (
    "You rewrite search queries for a document retrieval system. Reply with up to {n} alternative search "
    "queries for the user's query that could find the same information, one per line, in the same language "
    "as the query. Reply with the queries only: no numbering, no commentary."
)


def parse_alternatives(content: str) -> list[str]:
    """The answer's lines without list markers, blanks and over-long lines (usually commentary)."""
    lines = (_LIST_MARKER.sub("", line).strip() for line in content.splitlines())
    return [line for line in lines if line and len(line) <= MAX_LINE_CHARS]


class LLMExpander(QueryExpander):
    """One chat completion per query (``engines.llm``), not retried, and over within
    ``SEARCH_DEADLINE_MS`` (each socket operation within ``LLM_TIMEOUT_S``): the search must not wait."""

    name = "llm"

    @staticmethod
    def is_configured() -> bool:
        return bool(settings.LLM_URL)

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
        payload = {
            "model": settings.LLM_MODEL,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT.format(n=count)},
                {"role": "user", "content": query},
            ],
            "temperature": 0,
            "max_tokens": 200,
        }
        try:
            return chat_client.complete(
                settings.LLM_URL,
                settings.LLM_API_KEY,
                payload,
                timeout_s=settings.LLM_TIMEOUT_S,
                deadline_s=settings.SEARCH_DEADLINE_MS / 1000,
                purpose="expansion",
            )
        except LLMError as exc:
            raise ExpansionError(exc.cause, exc.message) from exc
