"""Ingestion gets its graph extraction from the graph app (``knowledge.graph_extraction``), for knowledge
imports nothing of the graph."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from engines.graph_extraction import EntityExtractor
from knowledge import graph_extraction


def test_the_graph_app_provides_the_extraction_at_startup(db, tenant):
    extraction = graph_extraction.graph_extraction()
    assert type(extraction).__module__ == "graph.extraction"
    assert isinstance(extraction.entity_extractor(tenant.pk, 0), EntityExtractor)
    assert extraction.triple_extractor() is None  # GRAPH_LLM_TRIPLES is off


def test_without_the_graph_app_ingestion_is_refused_with_a_reason(monkeypatch):
    monkeypatch.setattr(graph_extraction, "_provided", [])
    with pytest.raises(ImproperlyConfigured, match="add 'graph' to INSTALLED_APPS"):
        graph_extraction.graph_extraction()
