"""Variants: the request settings one row of results is measured with, and the grids that expand to
them."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from retrieval.expansion import ExpansionOptions
from retrieval.tuning import DEFAULT_FEEDBACK
from retrieval.types import SearchRequest

DEPTH = 100  # results per query: enough for Recall@100
EXPANDERS = ("synonyms", "spelling", "llm")


@dataclass(frozen=True)
class Variant:
    """One row of results: a mode and the request settings it depends on (None: the service default)."""

    mode: str
    candidates: int
    weights: tuple[tuple[str, float], ...] | None = None
    rrf_k: int | None = None
    expand: tuple[str, ...] = ()
    rerank: bool = False
    dense_weight_floor: float | None = None
    aggregate: str | None = None
    feedback: tuple[int, int, float] | None = None  # RM3 (docs, terms, query weight); None: the service default
    fusion: str | None = None  # rrf, relevance or minmax; None: the service default
    leg_weights: str | None = None  # RRF's: evidence or fixed; None: the service default
    leg_candidates: str | None = None  # hybrid: union or own; None: the service default
    top_k: int = DEPTH  # hits asked for: DEPTH for Recall@100; 10 scores the passages a client is given

    @property
    def label(self) -> str:
        parts = [self.mode, f"cand={self.candidates}"]
        if self.weights is not None:
            parts.append("w=" + ",".join(f"{name}={value:g}" for name, value in self.weights))
        if self.fusion is not None:
            parts.append(f"fusion={self.fusion}")
        if self.leg_weights is not None:
            parts.append(f"legs={self.leg_weights}")
        if self.leg_candidates is not None:
            parts.append(f"candidates_of={self.leg_candidates}")
        if self.rrf_k is not None:
            parts.append(f"k={self.rrf_k}")
        if self.dense_weight_floor is not None:
            parts.append(f"floor={self.dense_weight_floor:g}")
        if self.aggregate is not None:
            parts.append(f"aggregate={self.aggregate}")
        if self.feedback is not None:
            docs, terms, query_weight = self.feedback
            parts.append(f"rm3={docs}x{terms}@{query_weight:g}" if docs else "rm3=off")
        if self.expand:
            parts.append("expand=" + "+".join(self.expand))
        if self.rerank:
            parts.append("rerank")
        return " ".join(parts)

    def request(self, query: str, kb_id: int) -> SearchRequest:
        return SearchRequest(
            query=query,
            mode=self.mode,
            top_k=self.top_k,
            kb_ids=[kb_id],
            weights=dict(self.weights) if self.weights else None,
            candidates=self.candidates,
            fusion=self.fusion,
            leg_weights=self.leg_weights,
            leg_candidates=self.leg_candidates,
            rrf_k=self.rrf_k,
            dense_weight_floor=self.dense_weight_floor,
            aggregate=self.aggregate,
            feedback_docs=self.feedback[0] if self.feedback else None,
            feedback_terms=self.feedback[1] if self.feedback else None,
            feedback_query_weight=self.feedback[2] if self.feedback else None,
            rerank=self.rerank,
            expand=ExpansionOptions(**{name: name in self.expand for name in EXPANDERS}),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "mode": self.mode,
            "candidates": self.candidates,
            "weights": dict(self.weights) if self.weights is not None else None,
            "fusion": self.fusion,
            "leg_weights": self.leg_weights,
            "leg_candidates": self.leg_candidates,
            "rrf_k": self.rrf_k,
            "dense_weight_floor": self.dense_weight_floor,
            "aggregate": self.aggregate,
            "feedback": list(self.feedback) if self.feedback is not None else None,
            "expand": list(self.expand),
            "rerank": self.rerank,
        }


def parse_weight_grid(spec: str) -> list[tuple[tuple[str, float], ...]]:
    """``vector=0.5,1,bm25=1`` -> every combination: a bare number adds a value to the name before it."""
    grid: dict[str, list[float]] = {}
    name = None
    for item in (part.strip() for part in spec.split(",") if part.strip()):
        if "=" in item:
            name, item = (piece.strip() for piece in item.split("=", 1))
            grid.setdefault(name, [])
        if name is None:
            raise ValueError(f"weights {spec!r}: a value must follow a name, as in vector=0.5,bm25=1")
        grid[name].append(float(item))
    return [tuple(zip(grid, values)) for values in itertools.product(*grid.values())]


def parse_feedback(spec: str) -> tuple[int, int, float]:
    """``docs:terms:query_weight`` (``0`` alone: no feedback) -> RM3 settings; ValueError when malformed."""
    parts = spec.split(":")
    if parts == ["0"]:
        return 0, DEFAULT_FEEDBACK.terms, DEFAULT_FEEDBACK.query_weight
    if len(parts) != 3:
        raise ValueError(f"feedback {spec!r}: expected DOCS:TERMS:QUERY_WEIGHT such as 10:10:0.5, or 0")
    return int(parts[0]), int(parts[1]), float(parts[2])


def build_variants(
    modes: Sequence[str],
    *,
    candidates: Sequence[int],
    weights: Sequence[tuple[tuple[str, float], ...] | None] = (None,),
    rrf_ks: Sequence[int | None] = (None,),
    fusions: Sequence[str | None] = (None,),
    leg_weights: Sequence[str | None] = (None,),
    leg_candidates: Sequence[str | None] = (None,),
    floors: Sequence[float | None] = (None,),
    aggregates: Sequence[str | None] = (None,),
    feedbacks: Sequence[tuple[int, int, float] | None] = (None,),
    expand: tuple[str, ...] = (),
    rerank: bool = False,
) -> list[Variant]:
    """Every combination per mode; fusion settings apply to hybrid only, so a single-leg mode gets one
    row per candidate depth instead of identical repeats, feedback (BM25's) none to the vector mode, and
    RRF k and leg weights none to a score fusion."""
    variants: list[Variant] = []
    for mode in modes:
        hybrid = (
            itertools.product(weights, rrf_ks, floors, fusions, leg_weights, leg_candidates)
            if mode == "hybrid"
            else [(None,) * 6]
        )
        rm3 = [None] if mode == "vector" else feedbacks
        for (weight, rrf_k, floor, fusion, legs, union), depth, method, feedback in itertools.product(
            list(hybrid), candidates, aggregates, rm3
        ):
            rrf_k, legs = (rrf_k, legs) if fusion in (None, "rrf") else (None, None)
            variant = Variant(mode, depth, weight, rrf_k, expand, rerank, floor, method, feedback, fusion, legs, union)
            if variant not in variants:
                variants.append(variant)
    return variants
