"""What every retrieval leg of one search reads, built once by the outline (``retrieval.services.search``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines.analysis import Analyzer
from graph.query_setup import GraphQuerySetup
from retrieval.expansion.base import QueryVariant
from retrieval.expansion.rm3 import Feedback
from retrieval.filters import CompiledFilter
from retrieval.services.timings import StageTimings
from retrieval.types import ModelGroup
from tenants.models import Tenant


@dataclass(frozen=True)
class SearchContext:
    """One search's scope and plan, handed to the legs and the union as one value."""

    tenant: Tenant
    groups: tuple[ModelGroup, ...]  # the searched versions by embedding model
    version_ids: tuple[int, ...]  # every searched version, in the groups' order
    variants: tuple[QueryVariant, ...]  # the original query first
    weights: dict[str, float]  # retriever -> weight; 0: it does not run
    compiled: CompiledFilter
    analyzer: Analyzer  # the tenant's, with its vocabulary
    depths: dict[str, int]  # retriever -> how many hits each of its lists keeps
    hops: int  # the graph leg's neighbourhood
    feedback: Feedback  # RM3 on the BM25 leg
    timings: StageTimings
    query_vector: np.ndarray | None = None  # the caller's embedding of the original query (``caller_vector``)
    graph_setup: GraphQuerySetup | None = None  # what the graph leg applies to the query, when it runs
