"""Prices of what a request or an ingestion consumes (``core.cost``): one per unit, 0 by default."""

from __future__ import annotations

from pydantic import NonNegativeFloat

from retrieval_site.settings.base import Section


class Cost(Section):
    title = "Cost accounting"

    # Amounts are units times these prices, in whatever currency they are given in (COST_CURRENCY names it).
    COST_CURRENCY: str = ""
    COST_PRICE_EMBEDDING_TOKEN: NonNegativeFloat = 0.0  # local or remote embedder, queries and chunks
    COST_PRICE_EMBEDDING_CALL: NonNegativeFloat = 0.0
    COST_PRICE_RERANK_PAIR: NonNegativeFloat = 0.0  # one (query, passage) pair scored
    COST_PRICE_RERANK_CALL: NonNegativeFloat = 0.0
    COST_PRICE_LLM_TOKEN_IN: NonNegativeFloat = 0.0  # prompt tokens: expansion, triples, summaries
    COST_PRICE_LLM_TOKEN_OUT: NonNegativeFloat = 0.0  # completion tokens
    COST_PRICE_LLM_CALL: NonNegativeFloat = 0.0
    COST_PRICE_CPU_MS: NonNegativeFloat = 0.0  # a millisecond of the service's own CPU time
