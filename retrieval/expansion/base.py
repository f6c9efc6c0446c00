from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from engines.errors import ComponentError
from knowledge.selectors.search import SynonymRule


@dataclass(frozen=True)
class QueryVariant:
    """A query the retrievers run; its ``weight`` multiplies its lists' contributions in fusion."""

    text: str
    weight: float
    origin: str  # "original", "synonym", "spelling" or "llm"


@dataclass(frozen=True)
class ExpansionContext:
    tenant_id: int
    version_ids: tuple[int, ...]  # the active KB versions being searched (spelling uses their vocabulary)
    synonyms: tuple[SynonymRule, ...]  # the tenant's active rules (``knowledge.selectors.search.tenant_vocabulary``)
    max_expansions: int


class ExpansionError(ComponentError):
    """An expander failed; the search goes on with the other variants and reports ``cause``."""


class QueryExpander(ABC):
    name: str  # "synonyms", "spelling", "llm": the switch names in requests and tenant settings

    @abstractmethod
    def expand(self, query: str, context: ExpansionContext) -> list[QueryVariant]:
        """Extra variants of ``query`` (never the original itself), at most ``context.max_expansions``."""
