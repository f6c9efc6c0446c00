"""The fusion settings a search runs with: the request's, else its knowledge bases', else the service's.

Each searched KB brings its search settings (``knowledge.search_settings``: the KB's merged with its
active version's). A search of several KBs uses a KB value only where every searched KB agrees on it
(a missing key counts as the service default); where they disagree the service setting applies and a
note says so. The request's own values win over all of them. The result is part of the search cache key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from retrieval.expansion.rm3 import Feedback
from retrieval.types import SearchRequest

# What a search does when neither the request nor any KB sets them (not environment variables).
# How the lists become one (``retrieval.fusion_functions``), and what each leg ranks before fusion ("own": what it
# found; "union": also the other leg's first hits, scored without searching again, ``retrieval.services.union``):
# chosen by ``evaluate --choose-default`` (docs/benchmarks/decisions.md, "The protocol for defaults").
# RRF and "own" stay options per KB and request.
DEFAULT_FUSION = "minmax"
# RRF's leg weights per query: "evidence" scales each leg's weight by its first hit's calibrated relevance
# (``retrieval.fusion_functions.weighted_by_evidence``; docs/benchmarks/decisions.md, "Per-query leg weights");
# "fixed" keeps the configured weights for every query.
DEFAULT_LEG_WEIGHTS = "evidence"
DEFAULT_LEG_CANDIDATES = "union"
DEFAULT_AGGREGATE = "none"
DEFAULT_GROUP_BY = "chunk"
# RM3 feedback on the BM25 leg (``retrieval.expansion.rm3``): off unless a KB or the request turns it on.
DEFAULT_FEEDBACK = Feedback(docs=0, terms=10, query_weight=0.5)


@dataclass(frozen=True)
class FusionSettings:
    weights: dict[str, float]  # before the mode and the language floor apply
    fusion: str
    leg_weights: str
    leg_candidates: str
    rrf_k: int
    candidates: int
    dense_weight_floor: float
    aggregate: str
    group_by: str
    feedback_docs: int
    feedback_terms: int
    feedback_query_weight: float
    notes: tuple[str, ...] = ()
    leg_depths: dict[str, int] = field(default_factory=dict)  # the request's per-leg candidates; else ``candidates``

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def depth(self, retriever: str) -> int:
        """How many hits ``retriever``'s lists keep before fusion."""
        return self.leg_depths.get(retriever, self.candidates)

    @property
    def feedback(self) -> Feedback:
        return Feedback(self.feedback_docs, self.feedback_terms, self.feedback_query_weight)


def service_defaults(mode: str) -> dict[str, Any]:
    """The service's settings; three-way hybrid weighs the graph list by its own default, as a third
    voice beside BM25 and dense, not the graph mode's full weight."""
    weights = dict(settings.SEARCH_WEIGHTS)
    if mode == "hybrid":
        weights["graph"] = settings.SEARCH_WEIGHT_GRAPH_HYBRID
    return {
        "weights": weights,
        "fusion": DEFAULT_FUSION,
        "leg_weights": DEFAULT_LEG_WEIGHTS,
        "leg_candidates": DEFAULT_LEG_CANDIDATES,
        "rrf_k": settings.RRF_K,
        "candidates": settings.SEARCH_CANDIDATES,
        "dense_weight_floor": settings.DENSE_WEIGHT_FLOOR,
        "aggregate": DEFAULT_AGGREGATE,
        "group_by": DEFAULT_GROUP_BY,
        "feedback_docs": DEFAULT_FEEDBACK.docs,
        "feedback_terms": DEFAULT_FEEDBACK.terms,
        "feedback_query_weight": DEFAULT_FEEDBACK.query_weight,
    }


def effective_settings(request: SearchRequest, per_kb: list[dict[str, Any]]) -> FusionSettings:
    """``per_kb``: each searched KB's search settings, in any order."""
    defaults = service_defaults(request.mode)
    notes: list[str] = []

    def agreed(label: str, values: set[Any], default: Any) -> Any:
        if len(values) > 1:
            notes.append(f"the searched knowledge bases set different {label}: the service setting applies")
        return values.pop() if len(values) == 1 else default

    resolved: dict[str, Any] = {
        key: agreed(f"{key} values", {kb.get(key, default) for kb in per_kb}, default)
        for key, default in defaults.items()
        if key != "weights"
    }
    resolved["weights"] = {
        name: agreed(f"{name} weights", {kb.get("weights", {}).get(name, default) for kb in per_kb}, default)
        for name, default in defaults["weights"].items()
    }
    overrides = {
        "fusion": request.fusion,
        "leg_weights": request.leg_weights,
        "leg_candidates": request.leg_candidates,
        "rrf_k": request.rrf_k,
        "candidates": request.candidates if isinstance(request.candidates, int) else None,
        "dense_weight_floor": request.dense_weight_floor,
        "aggregate": request.aggregate,
        "group_by": request.group_by,
        "feedback_docs": request.feedback_docs,
        "feedback_terms": request.feedback_terms,
        "feedback_query_weight": request.feedback_query_weight,
    }
    resolved.update({key: value for key, value in overrides.items() if value is not None})
    resolved["weights"].update(request.weights or {})
    # A list shorter than top_k could not fill the answer (a request's own value is raised likewise).
    resolved["candidates"] = max(resolved["candidates"], request.top_k)
    if isinstance(request.candidates, dict):
        resolved["leg_depths"] = {leg: max(depth, request.top_k) for leg, depth in sorted(request.candidates.items())}
    return FusionSettings(**resolved, notes=tuple(notes))
