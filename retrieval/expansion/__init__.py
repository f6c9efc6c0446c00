"""Query expansion: the original query plus weighted variants from synonyms, spelling and an LLM.

An expander that fails never fails the search: it becomes a ``degraded`` entry and the other
variants (always including the original) are still searched.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from knowledge.selectors.search import SynonymRule
from retrieval.expansion.base import ExpansionContext, ExpansionError, QueryExpander, QueryVariant
from retrieval.expansion.common import top_variants
from retrieval.expansion.llm import LLMExpander
from retrieval.expansion.spelling import SpellingExpander
from retrieval.expansion.synonyms import SynonymExpander
from tenants.models import Tenant

__all__ = [
    "ExpansionContext",
    "ExpansionError",
    "ExpansionOptions",
    "ExpansionResult",
    "QueryExpander",
    "QueryVariant",
    "expand_query",
]

logger = logging.getLogger(__name__)

SYNONYMS = SynonymExpander()
SPELLING = SpellingExpander()
LLM = LLMExpander()
EXPANDERS: tuple[QueryExpander, ...] = (SYNONYMS, SPELLING, LLM)


@dataclass
class ExpansionOptions:
    """A request's switches; None leaves the decision to the tenant's ``expand_*`` default."""

    synonyms: bool | None = None
    spelling: bool | None = None
    llm: bool | None = None
    max_expansions: int = 3


@dataclass
class ExpansionResult:
    variants: list[QueryVariant]  # the original first (weight 1.0, origin "original"), then expansions
    degraded: list[dict[str, Any]]  # {"stage": "expand", "component", "cause", "message"}
    timings_ms: dict[str, float]  # per expander that ran


def _degraded(component: str, cause: str, message: str) -> dict[str, Any]:
    return {"stage": "expand", "component": component, "cause": cause, "message": message}


def expand_query(
    query: str,
    *,
    tenant: Tenant,
    version_ids: tuple[int, ...],
    synonyms: tuple[SynonymRule, ...],
    options: ExpansionOptions,
) -> ExpansionResult:
    """The variants to search for ``query`` in ``version_ids`` with the tenant's ``synonyms``; failing
    expanders are reported, not raised."""
    result = ExpansionResult(variants=[QueryVariant(query, 1.0, "original")], degraded=[], timings_ms={})
    if not query.strip() or options.max_expansions < 1:
        return result
    context = ExpansionContext(
        tenant_id=tenant.pk, version_ids=tuple(version_ids), synonyms=synonyms, max_expansions=options.max_expansions
    )
    expansions: list[QueryVariant] = []
    for expander in EXPANDERS:
        requested = getattr(options, expander.name)
        if not (requested if requested is not None else getattr(tenant, f"expand_{expander.name}")):
            continue
        if expander is LLM and not LLM.is_configured():
            if requested:  # asked for explicitly: say why it did not happen; a tenant default stays quiet
                result.degraded.append(_degraded(LLM.name, "not_configured", "LLM_URL is not set"))
            continue
        started = time.perf_counter()
        try:
            expansions += expander.expand(query, context)
        except ExpansionError as exc:
            logger.warning("query expander %s failed (%s): %s", expander.name, exc.cause, exc.message)
            result.degraded.append(_degraded(expander.name, exc.cause, exc.message))
        except Exception as exc:  # a bug or a database error: the message goes to the log, not to the client
            logger.exception("query expander %s crashed", expander.name)
            message = f"unexpected {type(exc).__name__}; details are in the service log"
            result.degraded.append(_degraded(expander.name, "internal_error", message))
        finally:
            result.timings_ms[expander.name] = round((time.perf_counter() - started) * 1000, 3)
    result.variants += top_variants(query, expansions, options.max_expansions)
    return result
