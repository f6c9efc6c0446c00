"""The graph extraction that ingestion and a passage's edit run, as the ``graph`` app provides it.

The graph domain reads knowledge (its passages, versions, vocabulary), so knowledge imports nothing of it
(tests/test_layers.py): at startup ``graph.apps.GraphConfig.ready`` hands its extraction wiring to
``provide``, and knowledge asks for it here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from engines.graph_extraction import EntityExtractor
    from engines.llm_triples import TripleExtractor


class GraphExtraction(Protocol):
    def entity_extractor(self, tenant_id: int, knowledge_base_id: int) -> EntityExtractor:
        """The extractor of a KB's passages: its tenant's vocabulary, its curators' rules."""
        ...

    def triple_extractor(self) -> TripleExtractor | None:
        """Typed relations from the LLM, or None when they are off."""
        ...


_provided: list[GraphExtraction] = []


def provide(extraction: GraphExtraction) -> None:
    """Called once at startup by the graph app."""
    _provided[:] = [extraction]


def graph_extraction() -> GraphExtraction:
    if not _provided:
        raise ImproperlyConfigured("the graph app provides the graph extraction: add 'graph' to INSTALLED_APPS")
    return _provided[0]
